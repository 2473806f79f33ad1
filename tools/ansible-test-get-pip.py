# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for the get-pip.py that ansible-test downloads to bootstrap pip in its venvs.

ansible-test --venv fetches get-pip-<version>.py from ci-files.testing.ansible.com, a host
that CI and the developers' machines cannot reach (only package registries are). It runs
the script as ``python get_pip_X_Y.py [pip options] pip==X.Y [--no-setuptools] [--no-wheel]``
inside a fresh ``venv --without-pip``. This does the same with the standard library's
ensurepip (the pip wheel bundled with Python), then lets that pip install the exact pip
version ansible-test asked for from the package index. tools/quality copies it into
ansible-test's cache (~/.ansible/test/cache/get_pip_X_Y.py) only when no real one is there.
"""

import subprocess
import sys

DROPPED = {"--no-setuptools", "--no-wheel"}


def main(argv):
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"],
                          stdout=subprocess.DEVNULL)
    pip_args = [arg for arg in argv if arg not in DROPPED]
    subprocess.check_call([sys.executable, "-m", "pip", "install"] + pip_args)


if __name__ == "__main__":
    main(sys.argv[1:])
