"""Shared O(T) machinery of the spline tokenizers: a C1 piecewise-cubic (Hermite) parameterization.

Both problems of DESIGN.md ("Spline enrichment") are solved in the same unknowns: the value x_k and the
slope d_k of the spline at every knot t_k (k = 0..64), i.e. 2 unknowns per knot. On interval
[t_k, t_k + h] the cubic Hermite piece through (x_k, d_k, x_{k+1}, d_{k+1}) is the minimiser of
∫(x'')² among functions with those end values, and its energy ½∫(x'')² is ½ uᵀ K u with the classical
beam stiffness

    K = 1/h³ [[12, 6h, -12, 6h], [6h, 4h², -6h, 2h²], [-12, -6h, 12, -6h], [6h, 2h², -6h, 4h²]]

over u = (x_k, d_k, x_{k+1}, d_{k+1}). Every data term of the two problems couples the unknowns of one
knot (price) or of one interval (volume, after eliminating its quartic bump in closed form), so the
normal equations are block tridiagonal with 2x2 blocks: symmetric positive definite as soon as the
data pin down the linear null space of the penalty. They are solved by block LDLᵀ (block Thomas).
The optimality conditions of that system are exactly C2 continuity at every knot and the natural
end conditions, so nothing is imposed by hand.

Layout (K knots): A[K, 3] diagonal blocks (a_xx, a_xd, a_dd); B[K-1, 4] the coupling of knot k with
knot k+1 (b_xx, b_xd, b_dx, b_dd; rows are knot k, columns knot k+1); r[K, 2] the right-hand side.
Factor: M[K, 4] forward multipliers B_{k-1}ᵀ S_{k-1}⁻¹, Sinv[K, 3] inverse pivots, P[K-1, 4] = S_k⁻¹ B_k.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def add_beam_stiffness(h, A, B):
    """A, B += the Hermite energy ½∫(x'')² of every interval; h[K-1] are the interval lengths."""
    for k in range(h.shape[0]):
        hk = h[k]
        i3 = 1.0 / (hk * hk * hk)
        i2 = i3 * hk
        i1 = i2 * hk
        A[k, 0] += 12.0 * i3
        A[k, 1] += 6.0 * i2
        A[k, 2] += 4.0 * i1
        A[k + 1, 0] += 12.0 * i3
        A[k + 1, 1] -= 6.0 * i2
        A[k + 1, 2] += 4.0 * i1
        B[k, 0] -= 12.0 * i3
        B[k, 1] += 6.0 * i2
        B[k, 2] -= 6.0 * i2
        B[k, 3] += 2.0 * i1


@njit(cache=True)
def factor_block_tridiag(A, B, M, Sinv, P):
    """Block LDLᵀ of the SPD block-tridiagonal matrix (A, B). Returns False if a pivot is not PD."""
    n = A.shape[0]
    s00 = A[0, 0]
    s01 = A[0, 1]
    s11 = A[0, 2]
    for k in range(n):
        if k > 0:
            # S_k = A_k - M_k B_{k-1}, with M_k = B_{k-1}ᵀ S_{k-1}⁻¹ (S symmetric)
            b00 = B[k - 1, 0]
            b01 = B[k - 1, 1]
            b10 = B[k - 1, 2]
            b11 = B[k - 1, 3]
            i00 = Sinv[k - 1, 0]
            i01 = Sinv[k - 1, 1]
            i11 = Sinv[k - 1, 2]
            m00 = b00 * i00 + b10 * i01
            m01 = b00 * i01 + b10 * i11
            m10 = b01 * i00 + b11 * i01
            m11 = b01 * i01 + b11 * i11
            M[k, 0] = m00
            M[k, 1] = m01
            M[k, 2] = m10
            M[k, 3] = m11
            s00 = A[k, 0] - (m00 * b00 + m01 * b10)
            s01 = A[k, 1] - (m00 * b01 + m01 * b11)
            s11 = A[k, 2] - (m10 * b01 + m11 * b11)
        det = s00 * s11 - s01 * s01
        # relative test: a (numerically) singular pivot means the data do not determine the fit
        if not (s00 > 0.0 and det > 1e-13 * s00 * s11):
            return False
        inv_det = 1.0 / det
        Sinv[k, 0] = s11 * inv_det
        Sinv[k, 1] = -s01 * inv_det
        Sinv[k, 2] = s00 * inv_det
        if k < n - 1:
            i00 = Sinv[k, 0]
            i01 = Sinv[k, 1]
            i11 = Sinv[k, 2]
            P[k, 0] = i00 * B[k, 0] + i01 * B[k, 2]
            P[k, 1] = i00 * B[k, 1] + i01 * B[k, 3]
            P[k, 2] = i01 * B[k, 0] + i11 * B[k, 2]
            P[k, 3] = i01 * B[k, 1] + i11 * B[k, 3]
    return True


@njit(cache=True)
def solve_block_tridiag(M, Sinv, P, r, u):
    """Solve with the factor of `factor_block_tridiag`; r[K, 2] is overwritten, the solution goes to u."""
    n = r.shape[0]
    for k in range(1, n):
        r[k, 0] -= M[k, 0] * r[k - 1, 0] + M[k, 1] * r[k - 1, 1]
        r[k, 1] -= M[k, 2] * r[k - 1, 0] + M[k, 3] * r[k - 1, 1]
    k = n - 1
    u[k, 0] = Sinv[k, 0] * r[k, 0] + Sinv[k, 1] * r[k, 1]
    u[k, 1] = Sinv[k, 1] * r[k, 0] + Sinv[k, 2] * r[k, 1]
    for k in range(n - 2, -1, -1):
        ux = u[k + 1, 0]
        ud = u[k + 1, 1]
        u[k, 0] = Sinv[k, 0] * r[k, 0] + Sinv[k, 1] * r[k, 1] - (P[k, 0] * ux + P[k, 1] * ud)
        u[k, 1] = Sinv[k, 1] * r[k, 0] + Sinv[k, 2] * r[k, 1] - (P[k, 2] * ux + P[k, 3] * ud)


@njit(cache=True)
def hermite_taylor(h, x0, d0, x1, d1):
    """(c2, c3) of the cubic Hermite piece at its left knot: x'' and x''' there (right-hand limits)."""
    ih = 1.0 / h
    delta = (x1 - x0) * ih
    c2 = (6.0 * delta - 4.0 * d0 - 2.0 * d1) * ih
    c3 = (6.0 * (d0 + d1) - 12.0 * delta) * ih * ih
    return c2, c3


_FMA = {"contract"}  # allow fused multiply-add (rounds once: no less accurate); nothing else
LANES = 16  # windows solved side by side: the sweeps are serial in k, so SIMD runs across windows


@njit(cache=True, fastmath=_FMA)
def solve_block_tridiag_lanes(M, Sinv, P, r0, r1, u0, u1):
    """`solve_block_tridiag` for LANES right-hand sides at once; r0, r1, u0, u1 are [K, LANES]
    (x and d components). The inner loops over lanes are independent and vectorise."""
    n = r0.shape[0]
    for k in range(1, n):
        m00 = M[k, 0]
        m01 = M[k, 1]
        m10 = M[k, 2]
        m11 = M[k, 3]
        for w in range(LANES):
            a = r0[k - 1, w]
            b = r1[k - 1, w]
            r0[k, w] -= m00 * a + m01 * b
            r1[k, w] -= m10 * a + m11 * b
    k = n - 1
    for w in range(LANES):
        u0[k, w] = Sinv[k, 0] * r0[k, w] + Sinv[k, 1] * r1[k, w]
        u1[k, w] = Sinv[k, 1] * r0[k, w] + Sinv[k, 2] * r1[k, w]
    for k in range(n - 2, -1, -1):
        i00 = Sinv[k, 0]
        i01 = Sinv[k, 1]
        i11 = Sinv[k, 2]
        p00 = P[k, 0]
        p01 = P[k, 1]
        p10 = P[k, 2]
        p11 = P[k, 3]
        for w in range(LANES):
            a = r0[k, w]
            b = r1[k, w]
            ux = u0[k + 1, w]
            ud = u1[k + 1, w]
            u0[k, w] = i00 * a + i01 * b - (p00 * ux + p01 * ud)
            u1[k, w] = i01 * a + i11 * b - (p10 * ux + p11 * ud)


@njit(cache=True)
def write_tokens(t, nodes, m, u, mu, tok):
    """Tokens tok[64, 4 or 5] at every knot of a window solved on a subset of its knots.

    The general path keeps only the knots `nodes[:m]` that touch a measurement: a run of knots without
    data lies inside one cubic piece (x'''' = 0 there and the spline is C2/C3 across them), and
    outside the first/last node the minimiser is the tangent line (zero curvature is free). Solving
    on the reduced knots is exact and avoids long data-free chains of small elements, whose Schur
    complements lose digits to cancellation. u[m, 2] holds (x, x') at the nodes; mu[m-1] the quartic
    bump of each element (volume; 0 for price), non-zero only on single-interval elements with data.
    """
    ncoef = tok.shape[1]
    first = nodes[0]
    last = nodes[m - 1]
    e = 0
    for k in range(tok.shape[0]):
        for j in range(2, ncoef):
            tok[k, j] = 0.0
        if k < first or k >= last:  # linear extension from the nearest end node
            j = 0 if k < first else m - 1
            slope = u[j, 1]
            tok[k, 0] = u[j, 0] + slope * (t[k] - t[nodes[j]])
            tok[k, 1] = slope
            continue
        while nodes[e + 1] <= k:
            e += 1
        H = t[nodes[e + 1]] - t[nodes[e]]
        s = t[k] - t[nodes[e]]
        x0 = u[e, 0]
        d0 = u[e, 1]
        c2, c3 = hermite_taylor(H, x0, d0, u[e + 1, 0], u[e + 1, 1])
        tok[k, 0] = x0 + s * (d0 + s * (0.5 * c2 + s * c3 / 6.0))
        tok[k, 1] = d0 + s * (c2 + 0.5 * s * c3)
        tok[k, 2] = c2 + s * c3
        tok[k, 3] = c3
        if ncoef == 5 and mu[e] != 0.0:  # then s = 0: the element is the single interval [t_k, t_k+1]
            H2 = H * H
            tok[k, 2] += 2.0 * mu[e] / H2
            tok[k, 3] -= 12.0 * mu[e] / (H2 * H)
            tok[k, 4] = 24.0 * mu[e] / (H2 * H2)
