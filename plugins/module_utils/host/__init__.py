# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the host: sysfs, PCI, NUMA topology, IOMMU groups, host facts and a running
tenant's realized placement. Every reader takes a root directory and runs no command."""
