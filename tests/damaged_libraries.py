"""Damaged copies of an exported library, for the checks that run before dlopen.

Each is what a disk, a copy or a download can do to a file, chosen so that loading it without a check
fails in the worst way: a flipped byte in the dynamic section ends the process with SIGSEGV inside
dlopen, a flipped byte in the middle (the read-only data holding the model) loads and runs silently, a
cut file ends it with SIGBUS.
"""

import struct

PT_DYNAMIC = 2


def dynamic_section_offset(data: bytes) -> int:
    """The file offset of the PT_DYNAMIC segment of a 64-bit little-endian ELF file."""
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        p_type, _, p_offset = struct.unpack_from("<IIQ", data, phoff + i * phentsize)
        if p_type == PT_DYNAMIC:
            return p_offset
    raise AssertionError("no PT_DYNAMIC segment")


def damaged_copies(data: bytes, trailer_bytes: int = 56) -> dict:
    """name -> the damaged bytes of the sealed library `data`."""
    middle = bytearray(data)
    middle[len(data) // 2] ^= 0xFF
    dynamic = bytearray(data)
    dynamic[dynamic_section_offset(data) + 8] ^= 0xFF  # the first entry's value
    return {
        "flipped_middle": bytes(middle),
        "flipped_dynamic": bytes(dynamic),
        "truncated": data[: len(data) // 2],
        "trailer_stripped": data[:-trailer_bytes],
    }
