# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Markdown for the reports that modules and the controller write: one escaper, so that
no value from a host (a tenant name, a device, an error) can end a table cell or turn
into a link or HTML in a report someone reads."""

from __future__ import annotations

import re


def markdown_text(text):
    """Any value as inert Markdown text, in a table cell or a line: the one escaper of
    the Markdown renderers. HTML that Markdown would pass through (<, >, &) becomes
    entities, a link's or code span's marks are backslash-escaped, and a line break or
    '|' cannot end the cell or the line."""
    text = " ".join(str(text).splitlines()) if text is not None else ""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`\[\]|])", r"\\\1", text)
