# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Output escaped by its renderer, and what other programs say parsed with a clear
error: a NUMA node id with markup in the fleet report's SVG and Markdown and the plan's
Markdown; VF addresses predicted past bus ff; an inference server's ready probe that
answers with a truncated body or a doubled Content-Length. Each test says what happened
before the fix."""

import asyncio
import xml.dom.minidom

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.guest import kserve_loadgen as lg
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import vf_address
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import fleet_render
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.markdown import markdown_text

MARKUP = '0"><script>alert(1)</script>|[x](javascript:y)'


def _report(node_id=MARKUP, host="h<1>", tenant="t|1"):
    node = {"gpus_free": 1, "gpus_free_clean": 1, "cores_free": 2, "cores_total": 4,
            "vfs_free": 0, "vfs_total": 0, "hugepages": {"1G<b>": {"free": 1, "total": 2}},
            "gpus": [{"address": "0000:65:00.0", "tenant": "<i>t</i>", "clean": True}]}
    totals = dict.fromkeys(("hosts", "hosts_without_data", "tenants", "gpus_free", "gpus_total",
                            "gpus_free_clean", "gpus_stranded", "cores_free", "cores_total",
                            "vfs_free"), 1)
    return {"totals": totals, "hosts": {host: {
        "nodes": {node_id: node},
        "tenants": [{"name": tenant, "node": node_id, "gpus": ["0000:65:00.0"], "vcpus": 2,
                     "memory_gib": 4, "vf": None}],
        "warnings": ["<b>warn</b>"]}}}


def test_the_fleet_svg_escapes_a_node_id_with_markup():
    # Before: the node id went into the SVG as it is (a <script> element).
    svg = fleet_render.render_svg(_report())
    document = xml.dom.minidom.parseString(svg)          # still well-formed XML
    assert not document.getElementsByTagName("script")
    assert "&lt;script&gt;" in svg


def test_the_fleet_markdown_escapes_every_cell():
    text = fleet_render.render_markdown(_report())
    assert "<script>" not in text and "<b>" not in text and "<i>" not in text
    assert "&lt;script&gt;" in text and "t\\|1" in text and "\\[x\\](javascript:y)" in text
    for line in text.splitlines():
        if line.startswith("| h"):
            # the escaped '|' keeps every row at its own number of cells
            assert len(line.replace("\\|", "").split("|")) in (8, 9), line


def test_markdown_text_keeps_a_value_on_its_line():
    assert markdown_text("a\nb|c") == "a b\\|c"


@pytest.mark.parametrize("index, address", [(0, "0000:fe:00.1"), (255, "0000:ff:00.0")])
def test_vf_addresses_up_to_bus_ff_are_predicted(index, address):
    assert vf_address("0000:fe:00.0", 1, 1, index) == address


def test_vf_addresses_past_bus_ff_are_refused():
    # Before: bus 0x100 was printed as 0000:100:..., an address that cannot exist.
    assert vf_address("0000:fe:00.0", 1, 1, 510) == "0000:ff:1f.7"
    with pytest.raises(GpuhostError) as info:
        vf_address("0000:fe:00.0", 1, 1, 511)
    assert info.value.field == "num_vfs" and "past bus ff" in info.value.message


def _serve(answer):
    """A one-shot HTTP server on 127.0.0.1 that sends ``answer`` and closes."""
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()
    return handle


@pytest.mark.parametrize("answer, words", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"ready\"", "IncompleteReadError"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 7\r\n\r\n{}", "Content-Length given twice"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n{}", "Content-Length given twice"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: \xd9\xa1\r\n\r\n{}", "no body length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not a chunk size"),
])
def test_a_ready_probe_with_an_odd_answer_is_a_clear_error(answer, words):
    # Before: a traceback (IncompleteReadError, ValueError from int()).
    async def main():
        server = await asyncio.start_server(_serve(answer), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            run = lg.LoadRun("http://127.0.0.1:%d" % port, "m",
                             [{"name": "x", "shape": [1], "datatype": "FP32"}], requests=1,
                             timeout_s=5, connect_timeout_s=5)
            await run._check_ready()
        finally:
            server.close()
            await server.wait_closed()
    with pytest.raises(GpuhostError) as info:
        asyncio.run(main())
    assert info.value.field == "url" and words in info.value.message, info.value.message
