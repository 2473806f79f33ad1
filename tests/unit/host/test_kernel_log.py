# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernel log's reset messages of a GPU, read from /dev/kmsg: its record format as
Documentation/ABI/testing/dev-kmsg gives it ("level,seq,usec,flags;text" and " KEY=value"
lines, DEVICE=+pci:<address> for a PCI function) and the messages as drivers/pci/pci.c
prints them, written into a simulated host's dev/kmsg (a real /dev/kmsg holds the lab's
own records only; its reads are the same code). A failed reset after the GPU was last
found sound unfits it; one before is history; validate names them without a mark."""

from __future__ import annotations

import json
import os

import pytest
from support.fixturegen import build_eight_gpu_host
from support.ledger_runs import ONE_GPU_TENANT as TENANT, run_ledger

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import device_state, host_facts, kernel_log
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger

GPU = "0000:41:00.0"
HOST_GPU = "0000:18:00.0"      # a GPU of build_eight_gpu_host
BOOT = "5a2b8c0e-6d1f-4e3a-9b7c-2f8e1d0c4b6a"
# The example record of Documentation/ABI/testing/dev-kmsg, then vfio-pci's own lines.
RECORDS = [
    (7, 160, "pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)", "acpi:PNP0A03:00"),
    (6, 900, "vfio-pci 0000:41:00.0: enabling device (0000 -> 0003)", "pci:0000:41:00.0"),
    (4, 1200, "vfio-pci 0000:41:00.0: timed out waiting for pending transaction; performing function "
              "level reset anyway", "pci:0000:41:00.0"),
    (4, 1201, "vfio-pci 0000:41:00.0: not ready 65535ms after FLR; giving up", "pci:0000:41:00.0"),
    (4, 1300, "vfio-pci 0000:42:00.0: not ready 1023ms after FLR; giving up", "pci:0000:42:00.0"),
]


def kmsg_text(records):
    lines = []
    for level, seq, text, device in records:
        lines.append("%d,%d,%d,-;%s" % (level, seq, seq * 1000, text))
        if device:
            lines.append(" SUBSYSTEM=%s" % device.split(":", 1)[0])
            lines.append(" DEVICE=+%s" % device)
    return "\n".join(lines) + "\n"


def write_log(root, records, boot_id=BOOT):
    os.makedirs(os.path.join(root, "dev"), exist_ok=True)
    with open(os.path.join(root, "dev", "kmsg"), "w", encoding="utf-8") as handle:
        handle.write(kmsg_text(records))
    os.makedirs(os.path.join(root, "proc/sys/kernel/random"), exist_ok=True)
    with open(os.path.join(root, "proc/sys/kernel/random/boot_id"), "w", encoding="utf-8") as handle:
        handle.write(boot_id + "\n")


def test_records_their_device_and_the_position_after_them_are_read(tmp_path):
    write_log(str(tmp_path), RECORDS)
    log = kernel_log.read_kernel_log(str(tmp_path))
    assert log.boot_id == BOOT and log.mark() == {"boot_id": BOOT, "seq": 1300}
    assert [m.address for m in log.messages] == [None, GPU, GPU, GPU, "0000:42:00.0"]
    assert log.about(GPU, kernel_log.RESET_FAILED) == (RECORDS[3][2],)
    assert log.about(GPU, kernel_log.RESET_NOTED) == (RECORDS[2][2],)
    # after a mark of this boot only what came later counts; a mark of another boot is no mark
    assert log.about(GPU, kernel_log.RESET_FAILED, {"boot_id": BOOT, "seq": 1201}) == ()
    assert log.about(GPU, kernel_log.RESET_FAILED, {"boot_id": "other", "seq": 5000}) == (RECORDS[3][2],)


def test_a_line_that_is_no_record_is_skipped_and_the_reader_is_bounded():
    text = "garbage\n6,1,2,-;vfio-pci 0000:41:00.0: not ready 1ms after FLR; giving up\n DEVICE=+pci:x\n" \
           + "".join("6,%d,1,-;line %d\n" % (n, n) for n in range(2, 10))
    messages = kernel_log.parse_kmsg(text, limit=4)
    assert len(messages) == 4 and messages[0].address == GPU and messages[0].seq == 1


@pytest.mark.parametrize("make", ["missing", "link", "directory"])
def test_a_log_that_cannot_be_read_is_unknown_not_clean(tmp_path, make):
    root = str(tmp_path / "host")
    os.makedirs(os.path.join(root, "dev"))
    if make == "link":
        outside = tmp_path / "elsewhere"
        outside.write_text(kmsg_text(RECORDS))
        os.symlink(str(outside), os.path.join(root, "dev", "kmsg"))
    elif make == "directory":
        os.makedirs(os.path.join(root, "dev", "kmsg"))
    assert kernel_log.read_kernel_log(root) is None


def test_a_failed_reset_since_the_mark_unfits_the_gpu_and_validate_only_names_it(tmp_path):
    root = str(tmp_path / "host")
    build_eight_gpu_host(root)
    # the simulated host's GPU 0000:18:00.0 takes the place of 0000:41:00.0 in the records
    write_log(root, [(level, seq, text.replace(GPU, HOST_GPU), device.replace(GPU, HOST_GPU))
                     for level, seq, text, device in RECORDS])
    GPU_HERE = HOST_GPU  # noqa: N806
    log = kernel_log.read_kernel_log(root)
    state = device_state.read_device_state(GPU_HERE, root, kernel_log=log)
    reasons = device_state.unfit_reasons(state)
    assert reasons and "failed a reset or power change" in reasons[0] and "65535ms after FLR" in reasons[0]
    assert state.as_dict()["reset_failures"] == [RECORDS[3][2].replace(GPU, HOST_GPU)]
    # since the GPU was found sound after that message: history, not a reason
    later = device_state.read_device_state(GPU_HERE, root, kernel_log=log,
                                           log_since={"boot_id": BOOT, "seq": 1250})
    assert device_state.unfit_reasons(later) == []
    # validate has no mark: it names the boot's failures and fails nothing on them
    facts = host_facts.read_devices([GPU_HERE], root)[GPU_HERE]
    assert facts["unfit"] == []
    assert any("65535ms after FLR" in note for note in facts["notes"])
    assert any("pending transaction" in note for note in facts["notes"])
    # without the log (not read) nothing is judged
    assert device_state.read_device_state(GPU_HERE, root).reset_failures is None


def test_release_quarantines_a_gpu_whose_vfio_reset_failed_and_recovery_counts_only_newer_failures(tmp_path):
    root = str(tmp_path / "host")
    build_eight_gpu_host(root)
    path = str(tmp_path / "ledger.json")
    write_log(root, RECORDS[:1])
    placed = run_ledger(root, path, tenants=[TENANT])
    gpu = placed["plan"]["tenants"][0]["gpus"][0]["address"]
    failure = "vfio-pci %s: not ready 65535ms after FLR; giving up" % gpu
    # the tenant's QEMU let the GPU go and vfio's reset of it failed
    write_log(root, RECORDS[:1] + [(4, 2000, failure, "pci:" + gpu)])

    released = run_ledger(root, path, state="absent", names=["a"])
    assert list(released["quarantined"]) == [gpu]
    assert any("kernel log says" in reason and "65535ms" in reason for reason in released["quarantined"][gpu])
    with open(path, encoding="utf-8") as handle:
        entry = json.load(handle)["body"]["quarantine"][gpu]
    assert entry["kernel_log_mark"] == {"boot_id": BOOT, "seq": 2000}

    # the same log at the recovery: the failure is from before the quarantine, and the
    # GPU reads sound, so it is lifted and its mark kept for the next release
    recovered = run_ledger(root, path, recover=[gpu])
    assert recovered["lifted"] == [gpu]
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle)["body"]["kernel_log_marks"] == {gpu: {"boot_id": BOOT, "seq": 2000}}
    # placed and released again with no new failure: not quarantined by the old line
    run_ledger(root, path, tenants=[dict(TENANT, gpus=[gpu])])
    again = run_ledger(root, path, state="absent", names=["a"])
    assert again["quarantined"] == {}


def test_a_recovery_that_fails_its_reset_again_keeps_the_quarantine(tmp_path):
    root = str(tmp_path / "host")
    build_eight_gpu_host(root)
    path = str(tmp_path / "ledger.json")
    write_log(root, [])
    placed = run_ledger(root, path, tenants=[TENANT])
    gpu = placed["plan"]["tenants"][0]["gpus"][0]["address"]
    write_log(root, [(4, 10, "vfio-pci %s: not ready 65535ms after FLR; giving up" % gpu, "pci:" + gpu)])
    run_ledger(root, path, state="absent", names=["a"])
    write_log(root, [(4, 10, "vfio-pci %s: not ready 65535ms after FLR; giving up" % gpu, "pci:" + gpu),
                     (3, 11, "vfio-pci %s: Unable to change power state from D3cold to D0, device "
                             "inaccessible" % gpu, "pci:" + gpu)])
    recovered = run_ledger(root, path, recover=[gpu])
    assert recovered["lifted"] == [] and "device inaccessible" in recovered["still_unfit"][gpu][0]


@pytest.mark.parametrize("marks", [{GPU: {"boot_id": BOOT}}, {GPU: {"boot_id": 1, "seq": 2}},
                                   {"../x": {"boot_id": None, "seq": 1}}, [1]])
def test_a_ledger_with_marks_of_another_shape_is_refused(tmp_path, marks):
    path = str(tmp_path / "ledger.json")
    data = ledger.LedgerData(kernel_log_marks=marks)
    ledger.write_ledger(path, data)
    with pytest.raises(GpuhostError, match="kernel_log_marks"):
        ledger.read_ledger(path)
