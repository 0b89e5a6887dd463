"""The GGUF container read in one pass: metadata as Python values, tensors as views into the memory-mapped file.

    c = GGUFContainer(path)
    c.fields["general.architecture"]      # 'llama'; arrays are lists (tokenizer.ggml.tokens: 128,256 str)
    t = c.tensors[0]; t.name, t.tensor_type, t.shape, t.data    # shape as GGUF lists it (ne0, the fastest, first)

The layout (GGUF v2/v3): magic "GGUF", version u32, tensor count u64, metadata count u64; each metadata entry a
string key, a u32 value type and the value (strings: u64 length then UTF-8 bytes; arrays: u32 item type, u64
count, items); each tensor a name, u32 dimension count, u64 dims, u32 type, u64 offset into the data section,
which starts at the next multiple of `general.alignment` (32 when absent). Parsing walks a memoryview with
struct: a vocabulary of 150,000 strings takes a fraction of a second (the gguf package's reader, which builds
numpy views per item, took 8.5 s on a 128,256-token vocabulary). Tensor `data` is what gguf.quants.dequantize
takes: float32/float16 arrays shaped by the dims for those types, else the bytes as uint8 [rows, bytes per
row]. Nothing is copied: the views keep the map alive."""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    tensor_type: Any          # gguf.GGMLQuantizationType
    shape: tuple[int, ...]    # GGUF's order: ne0 (the fastest axis) first
    data: np.ndarray


class GGUFContainer:
    def __init__(self, path: str | Path):
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        self.path = Path(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = memoryview(self._map)
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError(f"not a GGUF file (magic {bytes(buf[:4])!r})")
        self.version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if self.version not in (2, 3):
            raise ValueError(f"GGUF version {self.version} (sglite reads versions 2 and 3)")
        self._buf, at = buf, 24
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key, at = self._string(at)
            (kind,), at = struct.unpack_from("<I", buf, at), at + 4
            self.fields[key], at = self._value(kind, at)
        infos = []
        for _ in range(n_tensors):
            name, at = self._string(at)
            (n_dims,), at = struct.unpack_from("<I", buf, at), at + 4
            dims = struct.unpack_from(f"<{n_dims}Q", buf, at)
            at += 8 * n_dims
            kind, offset = struct.unpack_from("<IQ", buf, at)
            at += 12
            infos.append((name, tuple(int(d) for d in dims), kind, offset))
        align = int(self.fields.get("general.alignment", 32))
        start = (at + align - 1) // align * align
        self.tensors: list[TensorInfo] = []
        for name, dims, kind, offset in infos:
            qtype = GGMLQuantizationType(kind)
            block, size = GGML_QUANT_SIZES[qtype]
            count = int(np.prod(dims)) if dims else 1
            nbytes = count // block * size
            begin = start + offset
            if begin + nbytes > len(self._map):
                raise ValueError(f"tensor {name!r} runs past the end of the file (truncated?)")
            raw = np.frombuffer(self._map, dtype=np.uint8, count=nbytes, offset=begin)
            if qtype.name in ("F32", "F16"):
                data = raw.view(np.float32 if qtype.name == "F32" else np.float16).reshape(tuple(reversed(dims)))
            else:
                data = raw.reshape(count // dims[0], dims[0] // block * size)
            self.tensors.append(TensorInfo(name, qtype, dims, data))
        self._buf = None          # the parse's view; the tensors' arrays hold the map from here on
        buf.release()

    def release_pages(self) -> None:
        """Drops the file's pages from this process's memory (they stay in the page cache; a later read maps
        them again): after the weights are read, so resident memory is the model's, not the file's too."""
        if hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)

    def _string(self, at: int) -> tuple[str, int]:
        (n,) = struct.unpack_from("<Q", self._buf, at)
        return str(self._buf[at + 8:at + 8 + n], "utf-8", "replace"), at + 8 + n

    def _value(self, kind: int, at: int) -> tuple[Any, int]:
        if kind == STRING:
            return self._string(at)
        if kind == ARRAY:
            item, n = struct.unpack_from("<IQ", self._buf, at)
            at += 12
            if item == STRING:
                out = []
                for _ in range(n):
                    s, at = self._string(at)
                    out.append(s)
                return out, at
            if item in _NUMPY:
                arr = np.frombuffer(self._buf, dtype=_NUMPY[item], count=n, offset=at)
                return arr.tolist(), at + arr.nbytes
            out = []
            for _ in range(n):
                v, at = self._value(item, at)
                out.append(v)
            return out, at
        if kind not in _SCALARS:
            raise ValueError(f"unknown GGUF metadata type {kind}")
        fmt = _SCALARS[kind]
        return struct.unpack_from(fmt, self._buf, at)[0], at + struct.calcsize(fmt)
