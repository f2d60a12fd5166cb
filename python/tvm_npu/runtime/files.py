"""Writing a user's output files so that none is lost: every file tvm_npu writes (a library, a report, a
listing, a trace, a figure) goes through `replacing`.

- An output that is one of the command's inputs (the same path, a hard link or a symbolic link to it) is
  refused before anything runs: `tvm-npu compile model.onnx -o model.onnx` would otherwise replace the
  model with the library.
- The bytes go to a temporary file in the target's folder, renamed onto the target once complete: an
  interrupted or failed write leaves the old file (or none), never half of one. The rename also keeps a
  library that is loaded (dlopen maps the file) intact while its replacement is written:
  `tvm-npu asm --into lib.so -o lib.so` overwrote the mapped file in place and crashed the process.
- Any failure to write (a read-only folder, a path under a regular file, a full disk) is
  NPUError(ERR_INVALID_CONFIG) naming the path and the operating system's reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..contract.errors import NPUError

_CHOOSE = "choose an output path in a writable folder with free space"


def write_error(path: str | os.PathLike, err: OSError) -> NPUError:
    """The coded error of a failed write of `path`: the path and the operating system's reason."""
    reason = err.strerror or str(err)
    name = errno.errorcode.get(err.errno, "") if err.errno else ""
    where = f" ({err.filename})" if err.filename and str(err.filename) != str(path) else ""
    return NPUError(
        "ERR_INVALID_CONFIG", f"cannot write {str(path)!r}: {reason}{f' [{name}]' if name else ''}{where}; {_CHOOSE}"
    )


def check_distinct(output: str | os.PathLike, inputs: Iterable, flag: str = "--output") -> None:
    """Refuse an `output` that is one of `inputs` (None entries skipped): the same path, or an existing
    file that is the same file (a hard or symbolic link), so that writing it cannot destroy an input."""
    out = Path(output)
    for given in inputs:
        if given is None:
            continue
        src = Path(given)
        same = out.absolute() == src.absolute()
        if not same and out.exists() and src.exists():
            with contextlib.suppress(OSError):
                same = os.path.samefile(out, src)
        if same:
            what = "is" if out.absolute() == src.absolute() else "is the same file (a link) as"
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"{flag} {str(out)!r} {what} the input {str(src)!r}: writing it would destroy the input; "
                f"give another output path",
            )


def _temporary(path: Path) -> Path:
    """A new empty file next to `path` with its suffix (writers pick a format by the suffix), created
    with the mode a plain open() would give (0666 less the umask)."""
    for _ in range(16):
        tmp = path.with_name(f".{path.stem}.{secrets.token_hex(4)}.tmp{path.suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


def writable_folder(folder: str | os.PathLike, output: str | os.PathLike | None = None) -> None:
    """Check, before a long run, that files can be created in `folder` (created when missing): a coded
    `write_error` (naming `output`, the file to be written there, if given) now instead of after the work."""
    folder = Path(folder)
    try:
        _folder(folder)
        _temporary(folder / "probe").unlink()
    except OSError as err:
        raise write_error(output if output is not None else folder, err) from None


def _folder(folder: Path) -> None:
    """Create `folder` when missing; a regular file where a folder must be is ENOTDIR naming that file
    (mkdir's own error, "File exists", does not say which)."""
    for above in (folder, *folder.parents):
        if above.exists():
            if not above.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "a regular file where a folder must be", str(above))
            break
    folder.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path next to `path` to write; renamed onto `path` when the block ends normally,
    removed when it raises. An OSError of creating the folder, writing or renaming is the coded
    `write_error`; the folder is created when missing.

    Examples
    --------
    >>> with replacing("out/table.csv") as tmp:  # doctest: +SKIP
    ...     tmp.write_text(text)
    """
    path = Path(path)
    tmp = None
    try:
        _folder(path.parent)
        tmp = _temporary(path)
        yield tmp
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        if isinstance(err, BrokenPipeError):  # stdout went away (`| head`): not a file's problem
            raise
        raise write_error(path, err) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` through `replacing` (whole or not at all)."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` through `replacing` (whole or not at all)."""
    with replacing(path) as tmp:
        tmp.write_text(text)
    return Path(path)
