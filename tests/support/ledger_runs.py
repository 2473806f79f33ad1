# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tenant_ledger run in the test process on a simulated host, for the tests of what it
decides across tenants' lives (quarantine, the kernel log's resets, the release)."""

from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.modules import tenant_ledger

# One GPU, on the eight-GPU host (support.fixturegen.build_eight_gpu_host).
ONE_GPU_TENANT = {"name": "a", "gpus": 1, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}


def run_ledger(root, path, **args):
    """tenant_ledger's result outside check mode unless ``_ansible_check_mode`` says so;
    the simulated host has no hugepage pools to check."""
    args = dict({"_ansible_check_mode": False, "hugepage_check": "none"}, **args)
    args.update(path=path, root=root, _ansible_diff=False)
    with patch_module_args(args):
        module = tenant_ledger.build_module()
    worker = tenant_ledger.TenantLedger(module)
    worker.run()
    return worker.result
