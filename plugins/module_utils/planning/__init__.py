# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Planning: tenant placement on NUMA nodes, the allocation ledger, fleet placement and
the rendering of a plan. Pure functions over read topology; nothing here touches a host."""
