# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixture trees for the mechanism detector (host/mechanisms.py), laid out as the
distributions' packages lay them out: only the names and file types the detector
looks at, empty files otherwise."""

import os


def _file(root, path, text="", mode=0o755):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(full, mode)
    return full


def _dir(root, path):
    os.makedirs(os.path.join(str(root), path.lstrip("/")), exist_ok=True)


def _link(root, path, target):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    os.symlink(target, full)


def rhel9(root):
    """What grubby, grub2-tools, dracut and libvirt-daemon (9.x) install on RHEL 9,
    with virtqemud.socket enabled as the libvirt preset does."""
    _file(root, "/usr/sbin/grubby")
    _file(root, "/usr/sbin/grub2-mkconfig")
    _file(root, "/etc/default/grub", 'GRUB_ENABLE_BLSCFG=true\n', 0o644)
    _file(root, "/boot/loader/entries/0123abcd-5.14.0-362.el9.x86_64.conf", "title RHEL\n", 0o644)
    _file(root, "/usr/bin/dracut")
    _dir(root, "/etc/dracut.conf.d")
    for unit in ("virtqemud.socket", "virtqemud.service", "libvirtd.service", "libvirtd.socket"):
        _file(root, "/usr/lib/systemd/system/" + unit, "[Unit]\n", 0o644)
    _link(root, "/etc/systemd/system/sockets.target.wants/virtqemud.socket",
          "/usr/lib/systemd/system/virtqemud.socket")


def debian12(root):
    """Debian 12: grub2-common, initramfs-tools, libvirt-daemon-system 9.0 (whose
    package ships the modular units too, with libvirtd enabled)."""
    _file(root, "/usr/sbin/update-grub")
    _file(root, "/usr/sbin/grub-mkconfig")
    _file(root, "/etc/default/grub", 'GRUB_CMDLINE_LINUX=""\n', 0o644)
    _dir(root, "/etc/default/grub.d")
    _file(root, "/usr/sbin/update-initramfs")
    _file(root, "/etc/initramfs-tools/modules", "", 0o644)
    for unit in ("libvirtd.service", "virtqemud.service", "virtqemud.socket"):
        _file(root, "/lib/systemd/system/" + unit, "[Unit]\n", 0o644)
    _link(root, "/etc/systemd/system/multi-user.target.wants/libvirtd.service",
          "/lib/systemd/system/libvirtd.service")


def debian12_with_dracut(root):
    """Debian 12 after installing dracut, which replaces initramfs-tools: update-initramfs
    goes, its conffiles in /etc/initramfs-tools stay until a purge."""
    debian12(root)
    os.remove(os.path.join(str(root), "usr/sbin/update-initramfs"))
    _file(root, "/usr/bin/dracut")
    _dir(root, "/etc/dracut.conf.d")
