# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tenant domain of libvirt_pinned_domain: ``spec`` (the DomainSpec from the module
options), ``xml`` (the XML built from it and compared with libvirt's), ``compare`` (the
pure decision: actions, restart_required, diff), ``storage`` (the overlay disk and the
seed ISO) and ``preflight`` (the refusals checked before a define)."""
