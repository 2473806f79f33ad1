# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one domain exception of gpuhost.kvm.

The pure core raises GpuhostError; each module's main() converts it into fail_json in
one place. Every error names the input at fault (``field``) and what to do next
(``fix``), because the reader is an SRE at a rack at 3 a.m.
"""

from __future__ import annotations


class GpuhostError(Exception):
    """A refusal or a bad input, with the field it concerns and the way out."""

    def __init__(self, msg, field=None, fix=None, details=None):
        self.msg = msg
        self.field = field
        self.fix = fix
        self.details = details or {}
        super().__init__(self.message)

    @property
    def message(self):
        text = self.msg
        if self.field:
            text = "%s: %s" % (self.field, text)
        if self.fix:
            text = "%s. Fix: %s" % (text.rstrip("."), self.fix)
        return text

    def to_result(self):
        """Keys added to a module's fail_json result."""
        result = {"msg": self.message}
        if self.field:
            result["field"] = self.field
        if self.details:
            result["details"] = self.details
        return result
