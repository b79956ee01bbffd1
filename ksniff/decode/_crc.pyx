# cython: language_level=3, boundscheck=False, wraparound=False
"""CRC-32C (Castagnoli), the checksum of record batches, with the CPU's crc32 instruction (SSE 4.2).

Built by the project's own build beside the compiled capture walk (setup.py); ksniff.decode.crc uses it
when it is built and the CPU has the instruction (`hardware`), and the crc32c package otherwise, which
is also the reference a test holds this one to. The package does the same arithmetic as fast, but
importing it loads importlib.metadata to read its own version, a tenth of ksniff's whole start-up.

One crc32 instruction takes 8 bytes but waits about three cycles for the one before, so long data is
taken as three streams of BLOCK bytes checked side by side, and their three checksums are joined: the
checksum register after a block is a linear function of the register before it (plus a term of the
block's own bytes), so running a register through BLOCK zero bytes (`ks_shift`, from the 32 registers
of one bit each, run through BLOCK zero bytes once at start) and adding the next stream's checksum
continues it.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    #include <nmmintrin.h>
    #define KS_BLOCK 8192
    static uint32_t ks_zeros[32]; /* each one-bit register after KS_BLOCK zero bytes */
    static int ks_ready = 0;

    __attribute__((target("sse4.2")))
    static uint64_t ks_run(uint64_t c, const unsigned char *p, size_t n) {
        uint64_t word;
        for (; n >= 8; p += 8, n -= 8) {
            memcpy(&word, p, 8);
            c = _mm_crc32_u64(c, word);
        }
        for (; n; p++, n--)
            c = _mm_crc32_u8((uint32_t)c, *p);
        return c;
    }

    static uint32_t ks_shift(uint32_t c) {
        uint32_t out = 0;
        for (int bit = 0; c; bit++, c >>= 1)
            if (c & 1)
                out ^= ks_zeros[bit];
        return out;
    }

    static int ks_crc_available(void) {
        if (!__builtin_cpu_supports("sse4.2"))
            return 0;
        if (!ks_ready) {
            static const unsigned char zero[KS_BLOCK];
            for (int bit = 0; bit < 32; bit++)
                ks_zeros[bit] = (uint32_t)ks_run((uint64_t)1 << bit, zero, KS_BLOCK);
            ks_ready = 1;
        }
        return 1;
    }

    __attribute__((target("sse4.2")))
    static uint32_t ks_crc(uint32_t crc, const unsigned char *p, size_t n) {
        uint64_t a = crc ^ 0xFFFFFFFFu;
        while (n >= 3 * KS_BLOCK) {
            uint64_t b = 0, c = 0, x, y, z;
            for (const unsigned char *end = p + KS_BLOCK; p < end; p += 8) {
                memcpy(&x, p, 8);
                memcpy(&y, p + KS_BLOCK, 8);
                memcpy(&z, p + 2 * KS_BLOCK, 8);
                a = _mm_crc32_u64(a, x);
                b = _mm_crc32_u64(b, y);
                c = _mm_crc32_u64(c, z);
            }
            a = ks_shift(ks_shift((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
            p += 2 * KS_BLOCK;
            n -= 3 * KS_BLOCK;
        }
        return (uint32_t)ks_run(a, p, n) ^ 0xFFFFFFFFu;
    }
    #else
    static int ks_crc_available(void) { return 0; }
    static uint32_t ks_crc(uint32_t crc, const unsigned char *p, size_t n) { return crc; }
    #endif
    """
    int ks_crc_available()
    unsigned int ks_crc(unsigned int crc, const unsigned char *p, size_t n) nogil

hardware = bool(ks_crc_available())  # False: the CPU lacks the instruction; ksniff.decode.crc uses the package


def crc32c(data) -> int:
    """The CRC-32C of a bytes-like object (bytes, or a memoryview of them), as crc32c.crc32c gives it."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len >= 65536:  # long data: let the other threads run meanwhile
            with nogil:
                crc = ks_crc(0, <const unsigned char *>view.buf, view.len)
        else:
            crc = ks_crc(0, <const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return crc
