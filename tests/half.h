/* tests/half.h - bf16 and f16 written out here from the IEEE formats, for the
   tests that check the library's 16-bit paths against them (never the
   library's own converters).

   half_round: an f32 to bf16 or f16 bits, rounded to nearest even; f16
   subnormals by shifting the implicit one in; past f16's range, inf; nan
   stays nan. half_value: the bits as a double, exactly. */
#ifndef PAR_TEST_HALF_H
#define PAR_TEST_HALF_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "../parallel.h"

static PAR__MAYBE_UNUSED uint16_t half_round(par_dtype t, float f) {
    uint32_t u, a, sign, mant, r, rest, half;
    int e, sh;
    memcpy(&u, &f, 4);
    sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(t == PAR_BF16 ? (u >> 16) | 0x40u : sign | 0x7e00u); /* nan */
    if (t == PAR_BF16) return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    if (a == 0) return (uint16_t)sign;
    e = (int)(a >> 23) - 127 + 15, mant = (a & 0x7fffffu) | 0x800000u;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    sh = e >= 1 ? 13 : 14 - e;
    if (sh > 24) return (uint16_t)sign;
    r = mant >> sh, rest = mant & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rest > half || (rest == half && (r & 1u))) r++;
    if (e < 1) return (uint16_t)(sign | r); /* a carry into the smallest normal: the bits agree */
    {
        const uint32_t bits = ((uint32_t)e << 10) + (r - 0x400u); /* a carry of r moves into e */
        return (uint16_t)(sign | (bits >= 0x7c00u ? 0x7c00u : bits));
    }
}

static PAR__MAYBE_UNUSED double half_value(par_dtype t, uint16_t h) {
    if (t == PAR_BF16) {
        const uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    } else {
        const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        const double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
        return (h & 0x8000) ? -v : v;
    }
}
#endif
