# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the tests share: the repository's paths (one REPO), the sysfs simulator
(``sysfs_sim``), the fixture generators (``fixturegen``, ``fleetsim``), the real-dump trees
(``realtrees``), the domain tests' topologies and libvirt connections (``domain_xml``) and
the helpers that run the real ansible tools (``helpers``). tests/conftest.py puts tests/ on
the path, so every test imports ``support`` the same way under pytest and ansible-test."""

import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
FIXTURES = os.path.join(TESTS, "fixtures")
