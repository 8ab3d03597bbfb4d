"""Hand-built AVX-512 SGEMM in LLVM IR (llvmlite.ir), BLIS-style - the experiment behind
tracejit's codegen/gemm.py (see README.md in this directory for the design and results).

C[row_begin:row_end, :N] = op(A)[row_begin:row_end, :K] @ op(B)[:K, :N]   (row-major, beta=0)

void tj_sgemm_own(i64 transA, i64 transB, i64 M, i64 N, i64 K, float* A, i64 lda,
                  float* B, i64 ldb, float* C, i64 ldc, i64 row_begin, i64 row_end,
                  float* workspace)          # workspace: workspace_floats() floats per thread

A library module: ``Kernel(**params)`` builds, compiles and loads the function (the repo's
tracejit.codegen.llvm helpers) and ``Kernel.bind``/``Kernel.call`` run it on NumPy arrays. Used by
test_correct.py and bench.py in this directory.
"""
import ctypes
import importlib
import sys
import time
from pathlib import Path

import llvmlite.ir as ir
import numpy as np

# The repository root is three levels up (docs/experiments/sgemm_avx512/).
REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT))
tl = importlib.import_module("tracejit.codegen.llvm")  # read-only use of the compile/load helpers

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()
PTR = ir.PointerType()
VOID = ir.VoidType()


def c64(v):
    return ir.Constant(I64, v)


class Gen:
    def __init__(self, MR=8, NR=32, KC=256, MC=128, NC=4096, UNROLL=1, BROWS_L2=96 * 1024,
                 DIRECT_M=64):
        self.DIRECT_M = DIRECT_M  # rows per call up to which B is used unpacked (transB=0)
        assert NR % 16 == 0
        self.MR, self.NR, self.KC, self.MC, self.NC, self.UNROLL = MR, NR, KC, MC, NC, UNROLL
        self.BROWS_L2 = BROWS_L2  # floats of packed B for which the row-panel order is used
        self.m = ir.Module(name="tj_sgemm")
        self.V16 = ir.VectorType(F32, 16)
        self.VM = ir.VectorType(I1, 16)
        self.fma16 = ir.Function(self.m, ir.FunctionType(self.V16, [self.V16] * 3),
                                 "llvm.fma.v16f32")
        self.mload = {}
        self.mstore = {}

    # ---- intrinsics -------------------------------------------------------------------
    def masked_load(self, b, ptr, mask, n):
        vt, mt = ir.VectorType(F32, n), ir.VectorType(I1, n)
        if n not in self.mload:
            self.mload[n] = ir.Function(self.m, ir.FunctionType(vt, [PTR, I32, mt, vt]),
                                        f"llvm.masked.load.v{n}f32.p0")
        return b.call(self.mload[n], [ptr, ir.Constant(I32, 4), mask, ir.Constant(vt, None)])

    def masked_store(self, b, val, ptr, mask, n):
        vt, mt = ir.VectorType(F32, n), ir.VectorType(I1, n)
        if n not in self.mstore:
            self.mstore[n] = ir.Function(self.m, ir.FunctionType(VOID, [vt, PTR, I32, mt]),
                                         f"llvm.masked.store.v{n}f32.p0")
        b.call(self.mstore[n], [val, ptr, ir.Constant(I32, 4), mask])

    def lane_mask(self, b, limit, offset, n):
        """lanes l with offset + l < limit (limit, offset: i64)."""
        lim = b.trunc(b.sub(limit, offset), I32)
        vi = ir.VectorType(I32, n)
        first = b.insert_element(ir.Constant(vi, ir.Undefined), lim, ir.Constant(I32, 0))
        splat = b.shuffle_vector(first, ir.Constant(vi, ir.Undefined), ir.Constant(vi, [0] * n))
        return b.icmp_signed("<", ir.Constant(vi, list(range(n))), splat)

    def splat(self, b, x, n):
        vt = ir.VectorType(F32, n)
        vi = ir.VectorType(I32, n)
        first = b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(I32, 0))
        return b.shuffle_vector(first, ir.Constant(vt, ir.Undefined), ir.Constant(vi, [0] * n))

    # ---- control flow -----------------------------------------------------------------
    def loop(self, b, start, stop, step, body):
        fn = b.function
        pre = b.block
        cond = fn.append_basic_block("loop.cond")
        bod = fn.append_basic_block("loop.body")
        end = fn.append_basic_block("loop.end")
        b.branch(cond)
        b.position_at_end(cond)
        i = b.phi(I64)
        i.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", i, stop), bod, end)
        b.position_at_end(bod)
        body(i)
        i.add_incoming(b.add(i, step), b.block)
        b.branch(cond)
        b.position_at_end(end)

    def gep(self, b, p, idx):
        return b.gep(p, [idx], inbounds=True, source_etype=F32)

    def imin(self, b, x, y):
        return b.select(b.icmp_signed("<", x, y), x, y)

    # ---- micro-kernel -----------------------------------------------------------------
    def micro(self, name, nv):
        """C[0:mr, 0:nr] (+)= Ap(MR x kc, k-major) @ Bp(kc x NR, k-major), using nv vectors."""
        MR, NR = self.MR, self.NR
        fnty = ir.FunctionType(VOID, [I64, PTR, PTR, PTR, I64, I64, I64, I64])
        fn = ir.Function(self.m, fnty, name)
        fn.linkage = "internal"
        kc, Ap, Bp, C, ldc, accf, mr, nr = fn.args
        for a in (Ap, Bp, C):
            a.attributes.add("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        loop_bb = fn.append_basic_block("k.loop")
        store_bb = fn.append_basic_block("store")
        entry = b.block
        zero = ir.Constant(self.V16, None)
        b.cbranch(b.icmp_signed(">", kc, c64(0)), loop_bb, store_bb)
        b.position_at_end(loop_bb)
        k = b.phi(I64)
        k.add_incoming(c64(0), entry)
        acc = [[b.phi(self.V16) for _ in range(nv)] for _ in range(MR)]
        for row in acc:
            for a in row:
                a.add_incoming(zero, entry)
        cur = [[a for a in row] for row in acc]
        kk = k
        for _ in range(self.UNROLL):  # kc must be a multiple of UNROLL (driver guarantees)
            bv = [b.load(self.gep(b, Bp, b.add(b.mul(kk, c64(NR)), c64(16 * j))),
                         typ=self.V16, align=4)
                  for j in range(nv)]
            for i in range(MR):
                a = b.load(self.gep(b, Ap, b.add(b.mul(kk, c64(MR)), c64(i))), typ=F32, align=4)
                av = self.splat(b, a, 16)
                for j in range(nv):
                    cur[i][j] = b.call(self.fma16, [av, bv[j], cur[i][j]])
            kk = b.add(kk, c64(1))
        k.add_incoming(kk, loop_bb)
        for i in range(MR):
            for j in range(nv):
                acc[i][j].add_incoming(cur[i][j], loop_bb)
        b.cbranch(b.icmp_signed("<", kk, kc), loop_bb, store_bb)
        b.position_at_end(store_bb)
        res = [[b.phi(self.V16) for _ in range(nv)] for _ in range(MR)]
        for i in range(MR):
            for j in range(nv):
                res[i][j].add_incoming(zero, entry)
                res[i][j].add_incoming(cur[i][j], loop_bb)
        full = b.and_(b.icmp_signed("==", mr, c64(MR)), b.icmp_signed("==", nr, c64(16 * nv)))
        fast = fn.append_basic_block("fast")
        fast_acc = fn.append_basic_block("fast.acc")
        fast_set = fn.append_basic_block("fast.set")
        edge = fn.append_basic_block("edge")
        done = fn.append_basic_block("done")
        b.cbranch(full, fast, edge)
        b.position_at_end(fast)
        accb = b.icmp_signed("!=", accf, c64(0))
        b.cbranch(accb, fast_acc, fast_set)
        for blk, add in ((fast_acc, True), (fast_set, False)):
            b.position_at_end(blk)
            for i in range(MR):
                rowp = self.gep(b, C, b.mul(c64(i), ldc))
                for j in range(nv):
                    p = self.gep(b, rowp, c64(16 * j))
                    v = res[i][j]
                    if add:
                        v = b.fadd(v, b.load(p, typ=self.V16, align=4))
                    b.store(v, p, align=4)
            b.ret_void()
        b.position_at_end(edge)
        masks = [self.lane_mask(b, nr, c64(16 * j), 16) for j in range(nv)]
        accb = b.icmp_signed("!=", accf, c64(0))
        for i in range(MR):
            rowbb = fn.append_basic_block(f"edge.row{i}")
            nxt = fn.append_basic_block(f"edge.next{i}")
            b.cbranch(b.icmp_signed("<", c64(i), mr), rowbb, done)
            b.position_at_end(rowbb)
            rowp = self.gep(b, C, b.mul(c64(i), ldc))
            for j in range(nv):
                p = self.gep(b, rowp, c64(16 * j))
                old = self.masked_load(b, p, masks[j], 16)
                v = b.fadd(res[i][j], b.select(accb, old, ir.Constant(self.V16, None)))
                self.masked_store(b, v, p, masks[j], 16)
            b.branch(nxt)
            b.position_at_end(nxt)
        b.branch(done)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def micro_direct(self, name, R, nv):
        """C[0:R, 0:nr] = sum_k A(i,k) * B[k, 0:nr], unpacked: A(i,k) = a[i*ars + k*aks],
        B row k at b + k*ldb (masked loads beyond nr). No K blocking (small problems)."""
        fnty = ir.FunctionType(VOID, [I64, PTR, I64, I64, PTR, I64, PTR, I64, I64])
        fn = ir.Function(self.m, fnty, name)
        fn.linkage = "internal"
        K, a, ars, aks, bp, ldb, C, ldc, nr = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        loop_bb = fn.append_basic_block("k.loop")
        store_bb = fn.append_basic_block("store")
        entry = b.block
        zero = ir.Constant(self.V16, None)
        masks = [self.lane_mask(b, nr, c64(16 * j), 16) for j in range(nv)]
        rows = [self.gep(b, a, b.mul(c64(i), ars)) for i in range(R)]
        b.cbranch(b.icmp_signed(">", K, c64(0)), loop_bb, store_bb)
        b.position_at_end(loop_bb)
        k = b.phi(I64)
        k.add_incoming(c64(0), entry)
        acc = [[b.phi(self.V16) for _ in range(nv)] for _ in range(R)]
        for row in acc:
            for x in row:
                x.add_incoming(zero, entry)
        brow = self.gep(b, bp, b.mul(k, ldb))
        bv = [self.masked_load(b, self.gep(b, brow, c64(16 * j)), masks[j], 16) for j in range(nv)]
        koff = b.mul(k, aks)
        cur = []
        for i in range(R):
            av = self.splat(b, b.load(self.gep(b, rows[i], koff), typ=F32, align=4), 16)
            cur.append([b.call(self.fma16, [av, bv[j], acc[i][j]]) for j in range(nv)])
        k1 = b.add(k, c64(1))
        k.add_incoming(k1, loop_bb)
        for i in range(R):
            for j in range(nv):
                acc[i][j].add_incoming(cur[i][j], loop_bb)
        b.cbranch(b.icmp_signed("<", k1, K), loop_bb, store_bb)
        b.position_at_end(store_bb)
        res = [[b.phi(self.V16) for _ in range(nv)] for _ in range(R)]
        for i in range(R):
            for j in range(nv):
                res[i][j].add_incoming(zero, entry)
                res[i][j].add_incoming(cur[i][j], loop_bb)
        for i in range(R):
            rowp = self.gep(b, C, b.mul(c64(i), ldc))
            for j in range(nv):
                self.masked_store(b, res[i][j], self.gep(b, rowp, c64(16 * j)), masks[j], 16)
        b.ret_void()
        return fn

    # ---- packing ----------------------------------------------------------------------
    def pack_b(self):
        """Bp[panel q][k][0:NR] = op(B)[pc+k, jc+q*NR+j] (0 beyond N), kc padded to kcp."""
        NR = self.NR
        fnty = ir.FunctionType(VOID, [I64, PTR, I64, I64, I64, I64, I64, I64, PTR])
        fn = ir.Function(self.m, fnty, "pack_b")
        fn.linkage = "internal"
        transB, B, ldb, pc, kc, kcp, jc, nc, Bp = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        nt = fn.append_basic_block("nt")
        tr = fn.append_basic_block("tr")
        ret = fn.append_basic_block("ret")
        b.cbranch(b.icmp_signed("!=", transB, c64(0)), tr, nt)

        # op(B)[k, j] = B[k*ldb + j]: contiguous rows, masked vector loads
        b.position_at_end(nt)

        def panel_nt(jr):
            nr = b.sub(nc, jr)
            dst0 = self.gep(b, Bp, b.mul(jr, kcp))
            masks = [self.lane_mask(b, nr, c64(16 * v), 16) for v in range(NR // 16)]

            def krow(k):
                src = self.gep(b, B, b.add(b.mul(b.add(pc, k), ldb), b.add(jc, jr)))
                dst = self.gep(b, dst0, b.mul(k, c64(NR)))
                for v in range(NR // 16):
                    x = self.masked_load(b, self.gep(b, src, c64(16 * v)), masks[v], 16)
                    b.store(x, self.gep(b, dst, c64(16 * v)), align=4)
            self.loop(b, c64(0), kc, c64(1), krow)
            # zero padding rows kc..kcp
            def zrow(k):
                dst = self.gep(b, dst0, b.mul(k, c64(NR)))
                for v in range(NR // 16):
                    b.store(ir.Constant(self.V16, None), self.gep(b, dst, c64(16 * v)), align=4)
            self.loop(b, kc, kcp, c64(1), zrow)
        self.loop(b, c64(0), nc, c64(NR), panel_nt)
        b.branch(ret)

        # op(B)[k, j] = B[j*ldb + k]: scalar transpose (only small B in our shapes)
        b.position_at_end(tr)

        def panel_tr(jr):
            nr = b.sub(nc, jr)
            dst0 = self.gep(b, Bp, b.mul(jr, kcp))

            def col(j):
                valid = b.icmp_signed("<", j, nr)
                jj = self.imin(b, j, b.sub(nr, c64(1)))
                src = self.gep(b, B, b.add(b.mul(b.add(b.add(jc, jr), jj), ldb), pc))

                def kel(k):
                    x = b.load(self.gep(b, src, k), typ=F32, align=4)
                    x = b.select(valid, x, ir.Constant(F32, 0.0))
                    b.store(x, self.gep(b, dst0, b.add(b.mul(k, c64(NR)), j)), align=4)
                self.loop(b, c64(0), kc, c64(1), kel)

                def kz(k):
                    b.store(ir.Constant(F32, 0.0),
                            self.gep(b, dst0, b.add(b.mul(k, c64(NR)), j)), align=4)
                self.loop(b, kc, kcp, c64(1), kz)
            self.loop(b, c64(0), c64(NR), c64(1), col)
        self.loop(b, c64(0), nc, c64(NR), panel_tr)
        b.branch(ret)
        b.position_at_end(ret)
        b.ret_void()
        return fn

    def pack_a(self):
        """Ap[panel p][k][0:MR] = op(A)[ic+p*MR+i, pc+k] (0 beyond row_end), kc padded to kcp."""
        MR = self.MR
        VA = ir.VectorType(F32, MR)
        fnty = ir.FunctionType(VOID, [I64, PTR, I64, I64, I64, I64, I64, I64, PTR])
        fn = ir.Function(self.m, fnty, "pack_a")
        fn.linkage = "internal"
        transA, A, lda, ic, mc, pc, kc, kcp, Ap = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        nt = fn.append_basic_block("nt")
        tr = fn.append_basic_block("tr")
        ret = fn.append_basic_block("ret")
        b.cbranch(b.icmp_signed("!=", transA, c64(0)), tr, nt)

        def zero_pad(dst0):
            def zrow(k):
                b.store(ir.Constant(VA, None), self.gep(b, dst0, b.mul(k, c64(MR))), align=4)
            self.loop(b, kc, kcp, c64(1), zrow)

        # op(A)[i, k] = A[i*lda + k]: MR row pointers (clamped), build a vector per k
        b.position_at_end(nt)

        def panel_nt(ir_):
            mr = b.sub(mc, ir_)
            dst0 = self.gep(b, Ap, b.mul(ir_, kcp))
            rows = []
            for i in range(MR):
                ii = self.imin(b, c64(i), b.sub(mr, c64(1)))
                rows.append(self.gep(b, A, b.add(b.mul(b.add(b.add(ic, ir_), ii), lda), pc)))
            valid = [b.icmp_signed("<", c64(i), mr) for i in range(MR)]

            def kel(k):
                vec = ir.Constant(VA, None)
                for i in range(MR):
                    x = b.load(self.gep(b, rows[i], k), typ=F32, align=4)
                    x = b.select(valid[i], x, ir.Constant(F32, 0.0))
                    vec = b.insert_element(vec, x, ir.Constant(I32, i))
                b.store(vec, self.gep(b, dst0, b.mul(k, c64(MR))), align=4)
            self.loop(b, c64(0), kc, c64(1), kel)
            zero_pad(dst0)
        self.loop(b, c64(0), mc, c64(MR), panel_nt)
        b.branch(ret)

        # op(A)[i, k] = A[k*lda + i]: contiguous, masked vector loads of MR
        b.position_at_end(tr)

        # k in chunks of 8 rows, panels inside: the 8 source rows (often 4 KiB apart, same
        # L1 set) stay in L1 while all panels read them.
        def kchunk(kb):
            kend = self.imin(b, b.add(kb, c64(8)), kc)

            def panel_tr(ir_):
                mr = b.sub(mc, ir_)
                dst0 = self.gep(b, Ap, b.mul(ir_, kcp))
                mask = self.lane_mask(b, mr, c64(0), MR)

                def kel(k):
                    src = self.gep(b, A, b.add(b.mul(b.add(pc, k), lda), b.add(ic, ir_)))
                    x = self.masked_load(b, src, mask, MR)
                    b.store(x, self.gep(b, dst0, b.mul(k, c64(MR))), align=4)
                self.loop(b, kb, kend, c64(1), kel)
            self.loop(b, c64(0), mc, c64(MR), panel_tr)
        self.loop(b, c64(0), kc, c64(8), kchunk)
        self.loop(b, c64(0), mc, c64(MR), lambda ir_: zero_pad(self.gep(b, Ap, b.mul(ir_, kcp))))
        b.branch(ret)
        b.position_at_end(ret)
        b.ret_void()
        return fn

    # ---- driver -----------------------------------------------------------------------
    def workspace_floats(self):
        u = self.UNROLL
        kcmax = -(-self.KC // u) * u
        b_floats = kcmax * (-(-self.NC // self.NR) * self.NR)  # packed B: KC x NC
        a_floats = (-(-self.MC // self.MR) * self.MR) * kcmax  # packed A: MC x KC
        return b_floats + a_floats + 64

    def build(self):
        MR, NR, KC, MC, NC, U = self.MR, self.NR, self.KC, self.MC, self.NC, self.UNROLL
        micro_full = self.micro("micro_full", NR // 16)
        micro_narrow = self.micro("micro_n16", 1) if NR > 16 else micro_full
        pack_b, pack_a = self.pack_b(), self.pack_a()
        fnty = ir.FunctionType(VOID, [I64, I64, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64,
                                      I64, I64, PTR])
        fn = ir.Function(self.m, fnty, "tj_sgemm_own")
        transA, transB, M, N, K, A, lda, B, ldb, C, ldc, rb, re, ws = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        kmax = -(-KC // U) * U
        Bp = ws
        Ap = self.gep(b, ws, c64(kmax * (-(-NC // NR) * NR)))
        # K == 0: C = 0
        kz = fn.append_basic_block("kzero")
        main = fn.append_basic_block("main")
        b.cbranch(b.icmp_signed("<=", K, c64(0)), kz, main)
        b.position_at_end(kz)

        def zrow(i):
            rowp = self.gep(b, C, b.mul(i, ldc))
            self.loop(b, c64(0), N, c64(1),
                      lambda j: b.store(ir.Constant(F32, 0.0), self.gep(b, rowp, j), align=4))
        self.loop(b, rb, re, c64(1), zrow)
        b.ret_void()
        b.position_at_end(main)
        if self.DIRECT_M > 0:
            directs = {R: self.micro_direct(f"micro_direct{R}", R, NR // 16)
                       for R in range(1, MR + 1)}
            dbb = fn.append_basic_block("direct")
            pbb = fn.append_basic_block("packed")
            use_direct = b.and_(b.icmp_signed("==", transB, c64(0)),
                                b.icmp_signed("<=", b.sub(re, rb), c64(self.DIRECT_M)))
            b.cbranch(use_direct, dbb, pbb)
            b.position_at_end(dbb)
            tA = b.icmp_signed("!=", transA, c64(0))
            ars = b.select(tA, c64(1), lda)
            aks = b.select(tA, lda, c64(1))

            def drow(i0):
                mr = self.imin(b, c64(MR), b.sub(re, i0))
                abase = self.gep(b, A, b.mul(i0, ars))

                def dcol(j0):
                    nr = self.imin(b, c64(NR), b.sub(N, j0))
                    cp = self.gep(b, C, b.add(b.mul(i0, ldc), j0))
                    args = [K, abase, ars, aks, self.gep(b, B, j0), ldb, cp, ldc, nr]
                    after = fn.append_basic_block("d.after")
                    sw = b.switch(mr, after)
                    for R, f in directs.items():
                        blk = fn.append_basic_block(f"d.r{R}")
                        sw.add_case(c64(R), blk)
                        b.position_at_end(blk)
                        b.call(f, args)
                        b.branch(after)
                    b.position_at_end(after)
                self.loop(b, c64(0), N, c64(NR), dcol)
            self.loop(b, rb, re, c64(MR), drow)
            b.ret_void()
            b.position_at_end(pbb)
        # even K blocks: nkb = ceil(K/KC); kcb = ceil(K/nkb)
        nkb = b.sdiv(b.add(K, c64(KC - 1)), c64(KC))
        kcb = b.sdiv(b.add(K, b.sub(nkb, c64(1))), nkb)

        def jc_body(jc):
            nc = self.imin(b, c64(NC), b.sub(N, jc))

            def pc_body(pc):
                kc = self.imin(b, kcb, b.sub(K, pc))
                kcp = b.mul(b.sdiv(b.add(kc, c64(U - 1)), c64(U)), c64(U))
                b.call(pack_b, [transB, B, ldb, pc, kc, kcp, jc, nc, Bp])
                accf = b.zext(b.icmp_signed(">", pc, c64(0)), I64)

                def ic_body(ic):
                    mc = self.imin(b, c64(MC), b.sub(re, ic))
                    b.call(pack_a, [transA, A, lda, ic, mc, pc, kc, kcp, Ap])

                    def tile(ir_, jr):
                        nr = self.imin(b, c64(NR), b.sub(nc, jr))
                        bpanel = self.gep(b, Bp, b.mul(jr, kcp))
                        narrow = b.icmp_signed("<=", nr, c64(16))
                        mr = self.imin(b, c64(MR), b.sub(mc, ir_))
                        apanel = self.gep(b, Ap, b.mul(ir_, kcp))
                        cp = self.gep(b, C, b.add(b.mul(b.add(ic, ir_), ldc), b.add(jc, jr)))
                        args = [kcp, apanel, bpanel, cp, ldc, accf, mr, nr]
                        if micro_narrow is micro_full:
                            b.call(micro_full, args)
                        else:
                            with b.if_else(narrow) as (then, otherwise):
                                with then:
                                    b.call(micro_narrow, args)
                                with otherwise:
                                    b.call(micro_full, args)
                    # packed B block small (fits L2 comfortably): sweep C row-panel-wise
                    # (rows of C contiguous, avoids 4K-aliasing when ldc is a power of 2);
                    # else BLIS order (B micro-panel stays in L1, A block streams from L2).
                    small_b = b.icmp_signed("<=", b.mul(kcp, nc), c64(self.BROWS_L2))
                    with b.if_else(small_b) as (then, otherwise):
                        with then:
                            self.loop(b, c64(0), mc, c64(MR), lambda ir_: self.loop(
                                b, c64(0), nc, c64(NR), lambda jr: tile(ir_, jr)))
                        with otherwise:
                            self.loop(b, c64(0), nc, c64(NR), lambda jr: self.loop(
                                b, c64(0), mc, c64(MR), lambda ir_: tile(ir_, jr)))
                self.loop(b, rb, re, c64(MC), ic_body)
            self.loop(b, c64(0), K, kcb, pc_body)
        self.loop(b, c64(0), N, c64(NC), jc_body)
        b.ret_void()
        return str(self.m)


SIG = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 5 + [ctypes.c_void_p, ctypes.c_int64] * 3
                               + [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]))


class Kernel:
    def __init__(self, **params):
        self.gen = Gen(**params)
        text = self.gen.build()
        t = time.perf_counter()
        self.mod = tl.compile_module(text)
        self.compile_s = time.perf_counter() - t
        self.lib = tl.load(self.mod.object_code, ["tj_sgemm_own"])
        self.fn = SIG(self.lib.addresses["tj_sgemm_own"])
        self.ws_floats = self.gen.workspace_floats()
        self.ws = [np.zeros(self.ws_floats, np.float32) for _ in range(4)]

    def call(self, *a, **kw):
        self.bind(*a, **kw)()

    def bind(self, transA, transB, A, B, C, rb, re, ws_idx=0, col_range=None):
        """C = op(A) @ op(B); A, B are the stored (untransposed) arrays."""
        M, N = C.shape
        K = A.shape[0] if transA else A.shape[1]
        bptr, cptr, n = B.ctypes.data, C.ctypes.data, N
        if col_range is not None:  # split N by pointer offsets (each thread packs only its B part)
            c0, c1 = col_range
            bptr += 4 * (c0 * B.strides[0] // 4 if transB else c0)
            cptr += 4 * c0
            n = c1 - c0
        args = (transA, transB, M, n, K, A.ctypes.data, A.strides[0] // 4, bptr, B.strides[0] // 4,
                cptr, C.strides[0] // 4, rb, re, self.ws[ws_idx].ctypes.data)
        fn = self.fn
        return lambda: fn(*args)  # precomputed ctypes arguments: ~1 us per call
