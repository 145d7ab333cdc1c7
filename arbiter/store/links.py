"""Symbolic links another user could have planted on the way to a SQLite registry (issue 40 item 4).

In a folder another user can write (``/tmp``: mode 1777; a group-writable folder), that user can create
``victim.db -> /victim/0700dir/new.db`` or ``victim.db-wal -> ...`` before the victim's first use, on a box with
``fs.protected_symlinks=0`` (where the sticky bit does not stop a link from being followed). Following it lets them
choose where the victim's registry is created, read and written. Such a link (the registry file, a folder on its
path, or its ``-wal``, ``-shm`` or ``-journal``) is refused with its name, its target and the fix; a link in a
folder only its user (or root) can write is the user's own and is followed as before.
"""
from __future__ import annotations

import os
import stat

COMPANIONS = ("", "-wal", "-shm", "-journal")


def _links_on_the_way(path: str) -> list[str]:
    """Every prefix of ``path`` that is a symbolic link, then those of the registry's companions (beside the
    path as given and beside the file it resolves to)."""
    absolute = os.path.abspath(path)
    found, prefix = [], os.sep
    for part in absolute.split(os.sep)[1:-1]:
        prefix = os.path.join(prefix, part)
        if os.path.islink(prefix):
            found.append(prefix)
    real = os.path.realpath(absolute)
    for base in dict.fromkeys((absolute, real)):
        found += [base + suffix for suffix in COMPANIONS if os.path.islink(base + suffix)]
    return list(dict.fromkeys(found))


def planted_link(path: str) -> str | None:
    """Why the registry at ``path`` is refused: a symbolic link on its way that sits in a folder someone else can
    write (group- or world-writable, sticky or not). None when there is none."""
    for link in _links_on_the_way(path):
        folder = os.path.realpath(os.path.dirname(link))
        try:
            mode = stat.S_IMODE(os.stat(folder).st_mode)
            target = os.readlink(link)
        except OSError:
            continue
        if not mode & 0o022:
            continue  # a folder only its owner can write: the link is theirs
        resolved = os.path.realpath(path)
        use = (f"use the target itself (--db {resolved}) if it is yours" if link == os.path.abspath(path)
               else "use a registry in a folder only you can write")
        return (f"{link} is a symbolic link to {target}, in {folder}, a folder others can write (mode "
                f"{mode:04o}): whoever made the link chooses where the registry {path} is created, read and "
                f"written. It is refused; nothing was opened or created. Fix: {use}, and remove the link "
                f"(`rm {link}`) if you did not make it")
    return None
