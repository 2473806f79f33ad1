# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which boot loader tooling, initramfs generator and libvirt daemon layout a host has,
decided from its files below a root, not from its OS family alone.

The OS family is a poor witness: a Debian host may run dracut (Debian's dracut package
replaces initramfs-tools), Debian 12 ships the modular libvirt units beside libvirtd,
and RHEL 9 carries grub2-mkconfig next to grubby. So each choice is made from evidence
(binaries, configuration directories, BLS entries, enabled units) and the OS family's
default applies only where the evidence is not decisive (both found, or none); the
result says which, with the evidence, so a report shows why.

Only names and file types are read (lstat, readlink, listdir), never a file's content:
a huge file costs nothing, and a link that leads out of the root is no evidence.
"""

from __future__ import annotations

import os
import posixpath
import stat

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

KINDS = ("boot_loader", "initramfs", "libvirt")
CHOICES = {"boot_loader": ("grubby", "grub"), "initramfs": ("dracut", "initramfs-tools"),
           "libvirt": ("modular", "monolithic")}
# The family's own mechanisms, used only when the files do not decide.
OS_DEFAULTS = {
    "RedHat": {"boot_loader": "grubby", "initramfs": "dracut", "libvirt": "modular"},
    "Debian": {"boot_loader": "grub", "initramfs": "initramfs-tools", "libvirt": "monolithic"},
}
# Where a binary may live: merged /usr first, then the old split directories.
BIN_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
BLS_ENTRIES_DIR = "/boot/loader/entries"
MAX_ENTRIES_LISTED = 4096
# Per mechanism, what the roles pass on: the packages that provide it (per family),
# the commands and files it uses. One table, so no role keeps a second copy.
PACKAGES = {
    ("grubby", "RedHat"): ["grubby"], ("grubby", "Debian"): ["grubby"],
    ("grub", "RedHat"): ["grub2-tools"], ("grub", "Debian"): ["grub2-common"],
    ("dracut", "RedHat"): ["dracut"], ("dracut", "Debian"): ["dracut"],
    ("initramfs-tools", "Debian"): ["initramfs-tools"],
    ("initramfs-tools", "RedHat"): ["initramfs-tools"],
}
LIBVIRT_UNITS = {"modular": ["virtqemud.socket", "virtqemud.service"],
                 "monolithic": ["libvirtd.service"]}
# The iommu role's dracut snippet: its own file, not the install_items file the vfio
# role's run of the initramfs module keeps (dracut adds up every force_drivers+= line).
DRACUT_EARLY_MODULES_PATH = "/etc/dracut.conf.d/gpuhost-iommu-vfio.conf"
# dracut's install_items for the vfio-pci binding (vfio_bind's udev rules and driverctl
# overrides), a whole file of the initramfs module's own; its age is an input of every
# dracut image, so the iommu role's run rebuilds after a run killed before the vfio one's.
DRACUT_INSTALL_ITEMS_PATH = "/etc/dracut.conf.d/gpuhost-vfio.conf"
# The image names: RHEL's dracut writes initramfs-VERSION.img; Debian's kernel hooks and
# grub look for initrd.img-VERSION, whichever generator builds it.
IMAGE_PATTERNS = {"RedHat": "/boot/initramfs-%s.img", "Debian": "/boot/initrd.img-%s"}
_GRUB_COMMANDS = (("update-grub", ["update-grub"], "/boot/grub/grub.cfg"),
                  ("grub-mkconfig", ["grub-mkconfig", "-o", "/boot/grub/grub.cfg"], "/boot/grub/grub.cfg"),
                  ("grub2-mkconfig", ["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"], "/boot/grub2/grub.cfg"))
_FIXES = {
    "boot_loader": "install grubby (RHEL, BLS entries) or grub2-common (Debian, update-grub), "
                   "or give the method (grub or grubby) explicitly",
    "initramfs": "install dracut or initramfs-tools, or give the tool (dracut or "
                 "initramfs-tools) explicitly",
    "libvirt": "install libvirt (RHEL: libvirt, the modular virtqemud; Debian: "
               "libvirt-daemon-system, libvirtd), or name the units to start",
}


def _inside(root, real):
    return real == root or real.startswith(root.rstrip("/") + "/")


def _kind_below(root, host_path):
    """'file', 'dir', 'outside' (a link that leads out of the root), 'loop' (links
    that never end), or None (absent),
    for ``host_path`` below ``root``, following links the way the host would see them
    (an absolute target counts from the root)."""
    real_root = os.path.realpath(root)
    current = posixpath.normpath("/" + host_path.lstrip("/"))
    for dummy in range(40):
        full = os.path.join(real_root, current.lstrip("/"))
        # Resolve the directories above inside the root first (/sbin -> usr/sbin).
        parent = os.path.realpath(os.path.dirname(full))
        if not _inside(real_root, parent):
            return "outside"
        full = os.path.join(parent, os.path.basename(full))
        try:
            target = os.readlink(full)
        except OSError:
            break
        if posixpath.isabs(target):
            current = posixpath.normpath(target)
        else:
            joined = posixpath.normpath(posixpath.join(os.path.dirname(full), target))
            if not _inside(real_root, joined):
                return "outside"
            current = "/" + os.path.relpath(joined, real_root)
    else:
        return "loop"
    try:
        mode = os.lstat(full).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return None


def _binary(root, name):
    """The host path of the regular file ``name`` in a bin directory, or None; the
    second item is a note on a candidate that was refused (a link out of the root)."""
    notes = []
    for directory in BIN_DIRS:
        host_path = posixpath.join(directory, name)
        kind = _kind_below(root, host_path)
        if kind == "file":
            return host_path, notes
        if kind == "outside":
            notes.append("%s leads outside %s (ignored)" % (host_path, root))
        elif kind == "loop":
            notes.append("%s is a loop of links (ignored)" % host_path)
    return None, notes


def _dir(root, host_path):
    return _kind_below(root, host_path) == "dir"


def _bls_entries(root):
    if not _dir(root, BLS_ENTRIES_DIR):
        return []
    full = os.path.join(os.path.realpath(root), BLS_ENTRIES_DIR.lstrip("/"))
    try:
        names = os.listdir(full)[:MAX_ENTRIES_LISTED]
    except OSError:
        return []
    return sorted(name for name in names if name.endswith(".conf")
                  and _kind_below(root, posixpath.join(BLS_ENTRIES_DIR, name)) == "file")


def _unit_present(root, unit):
    for directory in UNIT_DIRS:
        host_path = posixpath.join(directory, unit)
        if _kind_below(root, host_path) == "file":
            return host_path
    return None


def _unit_enabled(root, unit):
    """The wants link that enables ``unit``, or None. Only the link's name counts: its
    target is the packaged unit, which a recorded tree may not hold."""
    if not _dir(root, "/etc/systemd/system"):
        return None
    top = os.path.join(os.path.realpath(root), "etc/systemd/system")
    try:
        wants = sorted(name for name in os.listdir(top) if name.endswith((".wants", ".requires")))
    except OSError:
        return None
    for directory in wants:
        link = os.path.join(top, directory, unit)
        if os.path.lexists(link):
            return "/etc/systemd/system/%s/%s" % (directory, unit)
    return None


def _boot_loader_evidence(root):
    evidence = {}
    grubby, notes = _binary(root, "grubby")
    entries = _bls_entries(root)
    if grubby and entries:
        evidence["grubby"] = ["%s exists" % grubby, "%d BLS entries in %s (%s)"
                              % (len(entries), BLS_ENTRIES_DIR, entries[0])]
    elif grubby:
        notes.append("%s exists but %s holds no entry: not a BLS host" % (grubby, BLS_ENTRIES_DIR))
    config = [path for path in ("/etc/default/grub", "/etc/default/grub.d")
              if _kind_below(root, path) in ("file", "dir")]
    for name, dummy_argv, dummy_cfg in _GRUB_COMMANDS:
        found, more = _binary(root, name)
        notes.extend(more)
        if found and config:
            evidence["grub"] = ["%s exists" % found, "%s exists" % config[0]]
            break
    return evidence, notes


def _initramfs_evidence(root):
    evidence = {}
    notes = []
    dracut, more = _binary(root, "dracut")
    notes.extend(more)
    if dracut and _dir(root, "/etc/dracut.conf.d"):
        evidence["dracut"] = ["%s exists" % dracut, "/etc/dracut.conf.d exists"]
    update, more = _binary(root, "update-initramfs")
    notes.extend(more)
    if update and _dir(root, "/etc/initramfs-tools"):
        evidence["initramfs-tools"] = ["%s exists" % update, "/etc/initramfs-tools exists"]
    return evidence, notes


def _libvirt_evidence(root):
    enabled = {}
    present = {}
    for layout, units in LIBVIRT_UNITS.items():
        for unit in units:
            link = _unit_enabled(root, unit)
            if link:
                enabled.setdefault(layout, []).append("%s enables %s" % (link, unit))
            found = _unit_present(root, unit)
            if found:
                present.setdefault(layout, []).append("%s exists" % found)
    return enabled, present


def _decide(kind, evidence, os_family, notes, prefer=None):
    """One kind's answer: the choice, where it came from, and why."""
    found = [choice for choice in CHOICES[kind] if choice in evidence]
    default = OS_DEFAULTS.get(os_family or "", {}).get(kind)
    answer = {"choice": None, "source": None, "evidence": evidence, "notes": notes,
              "os_default": default, "refusal": None}
    if len(found) == 1 or (found and prefer):
        answer["choice"] = found[0] if len(found) == 1 else prefer
        answer["source"] = "detected"
        return answer
    why = "both %s found" % " and ".join(found) if found else "none found"
    if default:
        answer["choice"] = default
        answer["source"] = "os_default (%s)" % why
        return answer
    answer["source"] = why
    answer["refusal"] = {"msg": "no %s mechanism decided: %s, and no default for the OS "
                                "family %r" % (kind, why, os_family), "fix": _FIXES[kind]}
    return answer


def detect_mechanisms(root="/", os_family=None):
    """The three mechanisms of the host below ``root``, each a dict: ``choice`` (None
    when undecided and the family has no default), ``source`` (``detected``, or
    ``os_default (both ... found)``/``os_default (none found)``), ``evidence`` per
    candidate, ``notes`` (evidence refused, such as links out of the root), the family's
    ``os_default``, a ``refusal`` text when undecided, and what the roles pass on."""
    boot_evidence, boot_notes = _boot_loader_evidence(root)
    # grubby with BLS entries wins over grub-mkconfig: on a BLS host (RHEL 9 has both)
    # the entries' options are what boots, and grub.cfg only reads the entries.
    boot = _decide("boot_loader", boot_evidence, os_family, boot_notes, prefer="grubby")
    init_evidence, init_notes = _initramfs_evidence(root)
    # dracut wins: on Debian its package replaces initramfs-tools, whose conffiles stay.
    initramfs = _decide("initramfs", init_evidence, os_family, init_notes, prefer="dracut")
    enabled, present = _libvirt_evidence(root)
    # What is enabled decides; if neither or both are, the units that exist decide
    # (Debian 12 ships the modular units beside libvirtd, so presence alone is weak).
    if len(enabled) == 1:
        libvirt = _decide("libvirt", enabled, os_family, [])
    else:
        notes = ["both layouts are enabled"] if len(enabled) == 2 else []
        libvirt = _decide("libvirt", present if not enabled else enabled, os_family, notes)
    result = {"boot_loader": boot, "initramfs": initramfs, "libvirt": libvirt,
              "os_family": os_family}
    family = os_family if os_family in OS_DEFAULTS else None
    boot["packages"] = PACKAGES.get((boot["choice"], family), []) if family else []
    initramfs["packages"] = PACKAGES.get((initramfs["choice"], family), []) if family else []
    boot.update(boot_loader_settings(boot["choice"], boot_evidence))
    initramfs.update(initramfs_settings(initramfs["choice"], family))
    libvirt["units"] = list(LIBVIRT_UNITS.get(libvirt["choice"], []))
    # What the vm role enables and starts: the daemon's service (its socket comes with it).
    libvirt["start_units"] = [unit for unit in libvirt["units"] if unit.endswith(".service")]
    return result


def boot_loader_settings(choice, evidence=None):
    """The grub method's generated file and regeneration command (the one found, else
    Debian's update-grub); nothing for grubby, which edits the entries itself."""
    if choice != "grub":
        return {"grub_cfg": None, "grub_update_argv": None}
    found = " ".join((evidence or {}).get("grub", []))
    for name, argv, cfg in _GRUB_COMMANDS:
        if "/%s exists" % name in found:
            return {"grub_cfg": cfg, "grub_update_argv": list(argv)}
    return {"grub_cfg": _GRUB_COMMANDS[0][2], "grub_update_argv": list(_GRUB_COMMANDS[0][1])}


def initramfs_settings(tool, os_family=None):
    """Where the initramfs module writes the early modules for ``tool``, which images it
    compares, and the command that rebuilds them."""
    if tool == "dracut":
        return {"early_modules_path": DRACUT_EARLY_MODULES_PATH,
                "image_pattern": IMAGE_PATTERNS.get(os_family or "RedHat", IMAGE_PATTERNS["RedHat"]),
                "rebuild_argv": ["dracut", "--force", "--regenerate-all"],
                "extra_inputs": [DRACUT_INSTALL_ITEMS_PATH]}
    if tool == "initramfs-tools":
        return {"early_modules_path": "/etc/initramfs-tools/modules",
                "image_pattern": IMAGE_PATTERNS["Debian"],
                "rebuild_argv": ["update-initramfs", "-u", "-k", "all"],
                # no file of vfio_bind's goes into an initramfs-tools image
                "extra_inputs": []}
    return {"early_modules_path": None, "image_pattern": None, "rebuild_argv": None,
            "extra_inputs": []}


def chosen(kind, root="/", os_family=None, field="method"):
    """One kind's choice for a module's ``auto``, or a GpuhostError with the fix."""
    answer = detect_mechanisms(root, os_family)[kind]
    if answer["choice"] is None:
        raise GpuhostError(answer["refusal"]["msg"], field=field, fix=answer["refusal"]["fix"])
    return answer
