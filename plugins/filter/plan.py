# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters over a placement plan: thin wrappers of plugin_utils plan_query and
plan_render, so the roles ask the plan the same questions the Python tests check."""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_render
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_query, validation


class FilterModule(object):

    def filters(self):
        return {
            "plan_tenants": plan_query.tenants_in_scope,
            "plan_tenant_firmwares": plan_query.tenant_firmwares,
            "plan_hugepages_total": plan_query.hugepages_total,
            "plan_hugepages_per_node": plan_query.hugepages_per_node,
            "plan_passthrough_functions": plan_query.passthrough_functions,
            "plan_vf_pfs": plan_query.vf_pfs,
            "plan_tenant_summary": plan_query.tenant_summary,
            "plan_irq_groups": plan_query.irq_groups,
            "plan_irq_affinity_groups": plan_query.irq_affinity_groups,
            "plan_markdown": plan_render.render_markdown,
            "plan_svg": plan_render.render_svg,
            "plan_html": plan_render.render_html,
            "bios_findings": validation.bios_findings,
            "validate_checklist": validation.checklist,
            "restart_required_add": validation.restart_required_add,
            "restart_required_summary": validation.restart_summary,
            "validate_report_markdown": validation.report_markdown,
            "validate_report_json": validation.report_json,
        }
