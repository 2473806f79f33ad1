"""Test set-up shared by every test: make the checkout importable as
ansible_collections.gpuhost.kvm, exactly as ansible.cfg makes it visible to Ansible."""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

FIXTURES = os.path.join(REPO, "tests", "fixtures")
