# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/lib.sh's lab_port_free, which lab/up asks before it gives QEMU an SSH port: free as
QEMU's user-mode network binds a port (SO_REUSEADDR), on real sockets of this machine."""

import os
import socket
import subprocess

from support.helpers import REPO


def _free(port):
    proc = subprocess.run(["bash", "-c", '. "$1"; lab_port_free "$2"', "-",
                           os.path.join(REPO, "lab", "lib.sh"), str(port)],
                          capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode == 0


def _listener():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_a_port_something_listens_on_is_not_free():
    server = _listener()
    try:
        assert not _free(server.getsockname()[1])
    finally:
        server.close()


def test_a_port_whose_lab_just_stopped_is_free_although_its_connections_linger():
    # The lab's QEMU closes first when it stops, so its side of every SSH connection sits
    # in TIME_WAIT for a minute: molecule's create right after destroy met that port as
    # "in use" (2026-12-02), while QEMU itself could bind it again.
    server = _listener()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, dummy = server.accept()
    accepted.close()
    server.close()
    client.close()
    plain = socket.socket()
    try:
        try:
            plain.bind(("127.0.0.1", port))
            lingering = False
        except OSError:
            lingering = True
    finally:
        plain.close()
    assert lingering, "no TIME_WAIT left to test with"
    assert _free(port)
