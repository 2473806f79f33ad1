"""The plan as tables and pictures, rendered from a real plan of the synthetic runbook
host (the planner's own output, not a hand-written plan)."""

import xml.etree.ElementTree as ET

import pytest

from support.fixturegen import build_runbook_host

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.plan_layout import layout_from_topology
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_render
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology

SVG = "{http://www.w3.org/2000/svg}"
TENANT = {"name": "tenant-a100", "gpus": ["0000:65:00.0"], "vcpus": 30, "memory_gib": 64,
          "hugepage_size": "1G", "nic_vf": True, "iothreads": 2}


@pytest.fixture(scope="module")
def runbook(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("runbook"))
    build_runbook_host(root)
    topo = read_host_topology(root, with_irqs=False)
    plan = plan_placement(topo, [TENANT, {"name": "tenant-b", "gpus": 0, "vcpus": 4,
                                          "memory_gib": 8, "hugepage_size": "2M"}])
    return plan, layout_from_topology(topo)


def test_layout_lists_nodes_cores_gpus_pfs_and_irq_devices(runbook):
    layout = runbook[1]
    assert sorted(layout["nodes"]) == ["0", "1"]
    assert layout["nodes"]["0"]["cores"][0] == [0, 32]
    assert len(layout["nodes"]["0"]["cores"]) == 16
    assert [g["address"] for g in layout["gpus"]] == ["0000:65:00.0"]
    assert layout["pfs"][0]["address"] == "0000:41:00.0"
    assert "0000:41:00.0" in [d["address"] for d in layout["irq_devices"]]
    assert layout["cpu_vendor"] == "GenuineIntel"


def test_markdown_has_a_table_per_node_with_every_core_and_device(runbook):
    plan, layout = runbook
    text = plan_render.render_markdown(plan, layout, title="Plan of hk-gpu-01")
    assert text.startswith("# Plan of hk-gpu-01\n")
    assert "## NUMA node 0" in text and "## NUMA node 1" in text
    assert "| 0 | 0,32 | housekeeping |" in text
    assert "| 1 | 1,33 | tenant-a100 | 1: vCPU 0, 33: vCPU 1 |" in text
    assert "| GPU | 0000:65:00.0 | tenant-a100 |" in text
    assert "| GPU companion | 0000:65:00.1 | tenant-a100 |" in text
    vf = [t for t in plan["tenants"] if t["name"] == "tenant-a100"][0]["vf"]["address"]
    assert "| VF | %s | tenant-a100 |" % vf in text
    assert "64 x 1G for tenants" in text
    node1 = text.split("## NUMA node 1")[1]
    assert "tenant-b" in node1 and "| free |" in node1
    # 16 cores on each node, each listed once.
    assert text.count("\n| 15 | ") == 2


def test_svg_is_well_formed_with_a_box_per_node_and_cores_coloured_by_owner(runbook):
    plan, layout = runbook
    svg = plan_render.render_svg(plan, layout)
    tree = ET.fromstring(svg)
    groups = tree.findall(SVG + "g")
    assert [g.get("id") for g in groups] == ["node0", "node1"]
    colours = plan_render.tenant_colours(plan)
    by_cpu = {}
    for rect in tree.iter(SVG + "rect"):
        title = rect.find(SVG + "title")
        if title is not None and title.text.startswith("CPU "):
            by_cpu[int(title.text.split(":")[0][4:])] = rect.get("fill")
    assert len(by_cpu) == 64
    assert by_cpu[0] == by_cpu[32] == plan_render.HOUSEKEEPING_COLOUR
    assert by_cpu[1] == colours["tenant-a100"]
    pins_b = [t for t in plan["tenants"] if t["name"] == "tenant-b"][0]["vcpu_pins"]
    assert all(by_cpu[c] == colours["tenant-b"] for c in pins_b)
    assert colours["tenant-a100"] != colours["tenant-b"]
    assert "0000:65:00.0" in svg


def test_rendering_is_deterministic_and_escapes_text(runbook):
    plan, layout = runbook
    assert plan_render.render_svg(plan, layout) == plan_render.render_svg(plan, layout)
    html = plan_render.render_html(plan, layout, title="a <b> & c")
    assert "<title>a &lt;b&gt; &amp; c</title>" in html
    ET.fromstring(plan_render.render_svg(plan, layout, title="x & <y>"))


def test_empty_plan_without_layout_still_renders(runbook):
    plan = runbook[0]
    empty = dict(plan, tenants=[], hugepages={})
    text = plan_render.render_markdown(empty)
    assert "## NUMA node 0" in text and "housekeeping" in text
    ET.fromstring(plan_render.render_svg(empty))


def test_markdown_and_summary_say_where_iothreads_run(runbook, tmp_path):
    from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_query
    plan, layout = runbook
    text = plan_render.render_markdown(plan, layout)
    assert "| Tenant | Node | vCPUs | Memory | GPUs | VF | IO threads |" in text
    # tenant-a100 fills node 0, so its iothreads share the emulator's housekeeping core
    assert "| 2 on 0,32 (shared with the emulator) |" in text
    assert "| none |" in text                                 # tenant-b asks for none
    root = str(tmp_path / "host")
    build_runbook_host(root)
    topo = read_host_topology(root, with_irqs=False)
    spare = plan_placement(topo, [dict(TENANT, vcpus=28)])
    text = plan_render.render_markdown(spare, layout_from_topology(topo))
    assert "| 2 on 15,47 (a core of their own) |" in text
    assert "| 15 | 15,47 | tenant-a100 | 15: iothreads, 47: iothreads |" in text
    assert "iothreads: 2 on 15,47 (a core of their own)" in "\n".join(
        plan_query.tenant_summary(spare, "tenant-a100"))
