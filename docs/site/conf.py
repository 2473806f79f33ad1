# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sphinx configuration of the gpuhost.kvm documentation site (tools/docs-site).

Started from ``antsibull-docs sphinx-init``. Differences: no network. Instead of the
intersphinx inventories of docs.python.org and docs.ansible.com, which the build
machines cannot fetch, one local inventory (written by tools/docs-site) resolves the
single Ansible label the generated pages link to."""

project = "gpuhost.kvm"
copyright = "gpuhost.kvm contributors"  # pylint: disable=redefined-builtin
title = "gpuhost.kvm documentation"
html_short_title = "gpuhost.kvm"

extensions = ["sphinx.ext.intersphinx", "sphinx_antsibull_ext"]

pygments_style = "ansible"
highlight_language = "YAML+Jinja"

html_theme = "sphinx_ansible_theme"
html_show_sphinx = False
display_version = False
html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False

# Written by tools/docs-site next to the generated rst/ tree.
intersphinx_mapping = {
    "ansible_devel": ("https://docs.ansible.com/projects/ansible/devel/", "../ansible_devel.inv"),
}
intersphinx_disabled_reftypes = []

default_role = "any"
nitpicky = True
