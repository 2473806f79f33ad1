"""Test set-up shared by every test: make the checkout importable as
ansible_collections.gpuhost.kvm, exactly as ansible.cfg makes it visible to Ansible."""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# The tests import their helpers as top-level modules (fixturegen, helpers, realtrees,
# test_host_safety, ...). Plain pytest finds them through its rootdir/basedir insertion;
# ansible-test units imports test files as ansible_collections.gpuhost.kvm.tests.unit.*
# packages instead, so both directories are put on the path here for either runner.
for _helpers_dir in (os.path.join(REPO, "tests", "unit"), os.path.join(REPO, "tests")):
    if _helpers_dir not in sys.path:
        sys.path.insert(0, _helpers_dir)

FIXTURES = os.path.join(REPO, "tests", "fixtures")
