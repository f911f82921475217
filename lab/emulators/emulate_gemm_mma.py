#!/usr/bin/env python3
# emulate_gemm_mma.py: numpy emulation of gemm_mma_nt_kernel (src/backend/cuda/gemm_mma.cu) data flow: load
# mapping, padded stages, ldmatrix lane mapping, PTX m16n8k16/m16n8k8 fragment layouts, epilogue. No GPU needed.
# Emulates gemm_mma_nt_kernel's data flow (smem layout, ldmatrix, mma fragment layouts per PTX ISA) in numpy.
import numpy as np, sys
BM=BN=128; ROWB=128; STRIDE=144; STAGES=3
def run(tf32, M, N, K, vec, seed=0):
    rng=np.random.default_rng(seed)
    A=rng.integers(-8,8,(M,K)).astype(np.float64); B=rng.integers(-8,8,(N,K)).astype(np.float64)
    EB=4 if tf32 else 2; CH=16//EB; BK=ROWB//EB; EPR=STRIDE//EB  # elements per padded row
    C=np.full((M,N),np.nan)
    tiles_m=(M+BM-1)//BM; tiles_n=(N+BN-1)//BN
    for pid in range(tiles_m*tiles_n):
        per_group=8*tiles_n; first_m=(pid//per_group)*8; gsize=min(tiles_m-first_m,8)
        tm=first_m+(pid%per_group)%gsize; tn=(pid%per_group)//gsize; m0=tm*BM; n0=tn*BN
        smem=np.full((STAGES,256*EPR),np.nan)
        def load(stage,kt):
            for tid in range(256):
                c=tid&7; k=kt*BK+c*CH
                for i in range(8):
                    isA=i<4; r=(tid>>3)+32*i; rr=r if isA else r-128; grow=(m0 if isA else n0)+rr
                    lim=M if isA else N; src=A if isA else B
                    base=r*EPR+c*CH
                    vals=np.zeros(CH)
                    if vec:
                        if grow<lim and k<K: vals=src[grow,k:k+CH]; assert len(vals)==CH
                    else:
                        if grow<lim:
                            for e in range(CH):
                                if k+e<K: vals[e]=src[grow,k+e]
                    smem[stage,base:base+CH]=vals
        def ldm(stage,addrs):  # addrs[lane] = byte offset; returns regs[lane][j] = tuple of elements
            out=[[None]*4 for _ in range(32)]
            for j in range(4):
                for t in range(32):
                    a=addrs[8*j+t//4]; assert a%16==0
                    w=a+4*(t%4)
                    out[t][j]=tuple(smem[stage,(w+q*EB)//EB] for q in range(4//EB))
            return out
        ktiles=(K+BK-1)//BK
        acc=np.zeros((8,32,4,4,4))
        for s in range(STAGES-1):
            if s<ktiles: load(s,s)
        for kt in range(ktiles):
            nk=kt+STAGES-1
            # compute reads stage kt%STAGES; prefetch into nk%STAGES (different stage) -- order irrelevant in emulation,
            # but check they differ
            if nk<ktiles: assert nk%STAGES!=kt%STAGES
            st=kt%STAGES
            for warp in range(8):
                wm=warp>>2; wn=warp&3
                a_off=[(wm*64+(l&15))*STRIDE+(l>>4)*16 for l in range(32)]
                b_off=[(128+wn*32+(l&7)+((l>>4)<<3))*STRIDE+((l>>3)&1)*16 for l in range(32)]
                for kk in range(4):
                    af=[ldm(st,[a_off[l]+mt*16*STRIDE+kk*32 for l in range(32)]) for mt in range(4)]
                    bf=[]
                    for np_ in range(2):
                        r=ldm(st,[b_off[l]+np_*16*STRIDE+kk*32 for l in range(32)])
                        bf.append([(r[l][0],r[l][1]) for l in range(32)]); bf.append([(r[l][2],r[l][3]) for l in range(32)])
                    for mt in range(4):
                        for nt in range(4):
                            # rebuild matrices from fragments per PTX ISA layouts
                            if tf32:
                                Am=np.zeros((16,8)); Bm=np.zeros((8,8))
                                for l in range(32):
                                    g=l>>2; t=l&3; a=af[mt][l]
                                    Am[g,t]=a[0][0]; Am[g+8,t]=a[1][0]; Am[g,t+4]=a[2][0]; Am[g+8,t+4]=a[3][0]
                                    b=bf[nt][l]; Bm[t,g]=b[0][0]; Bm[t+4,g]=b[1][0]
                            else:
                                Am=np.zeros((16,16)); Bm=np.zeros((16,8))
                                for l in range(32):
                                    g=l>>2; t=l&3; a=af[mt][l]
                                    Am[g,2*t:2*t+2]=a[0]; Am[g+8,2*t:2*t+2]=a[1]; Am[g,2*t+8:2*t+10]=a[2]; Am[g+8,2*t+8:2*t+10]=a[3]
                                    b=bf[nt][l]; Bm[2*t:2*t+2,g]=b[0]; Bm[2*t+8:2*t+10,g]=b[1]
                            D=Am@Bm
                            for l in range(32):
                                g=l>>2; t=l&3
                                acc[warp,l,mt,nt]+= [D[g,2*t],D[g,2*t+1],D[g+8,2*t],D[g+8,2*t+1]]
            if nk<ktiles: load(nk%STAGES,nk)
        for warp in range(8):
            wm=warp>>2; wn=warp&3
            for l in range(32):
                g=l>>2; t=l&3
                for nt in range(4):
                    col=n0+wn*32+nt*8+2*t
                    if col>=N: continue
                    for mt in range(4):
                        for h in range(2):
                            row=m0+wm*64+mt*16+g+8*h
                            if row>=M: continue
                            C[row,col]=acc[warp,l,mt,nt,2*h]
                            if col+1<N: C[row,col+1]=acc[warp,l,mt,nt,2*h+1]
    ref=A@B.T
    assert not np.isnan(C).any(), "unwritten/NaN"
    err=np.abs(C-ref).max()
    print("tf32" if tf32 else "bf16", M,N,K,"vec" if vec else "scalar", "maxerr",err); assert err==0
for tf32 in (0,1):
    run(tf32,150,140,136,True)   # K*EB%16==0 for both (136*2=272, 136*4=544)
    run(tf32,130,129,101,False)
    run(tf32,40,200,200,True)

# ---- tf32 in the training layouts (gemm_mma_kernel<tf32, A_MN, B_MN, VEC>) --------------------------------------
# A_MN: A stored (K, M); B_MN: B stored (K, N). MN-major tiles stay as stored in shared memory (32 K rows of 128
# fp32, row stride MN_STRIDE bytes) and the fragments are read with 32-bit loads; K-major tiles as above (ldmatrix).
# Also emulates accumulate (C += A.B) and the bias.
MN_STRIDE=544; B_OFF=BM*STRIDE; STAGE_BYTES=(BM+BN)*STRIDE
def run_layout(a_mn, b_mn, M, N, K, vec, acc_mode, seed=1, splits=1):
    rng=np.random.default_rng(seed)
    Al=rng.integers(-8,8,(M,K)).astype(np.float64); Bl=rng.integers(-8,8,(N,K)).astype(np.float64)
    bias=rng.integers(-8,8,N).astype(np.float64)
    Ast=Al.T.copy() if a_mn else Al   # stored arrays as the kernel sees them
    Bst=Bl.T.copy() if b_mn else Bl
    C0=rng.integers(-8,8,(M,N)).astype(np.float64)
    Cfinal=C0.copy() if acc_mode else np.full((M,N),np.nan)
    BK=32
    tiles_m=(M+BM-1)//BM; tiles_n=(N+BN-1)//BN
    # split-K as the launcher: whole K tiles per split, no empty split; partials to a workspace, then an ordered sum
    ktiles_all=(K+BK-1)//BK; kps=ktiles_all; S=1
    if splits>1 and ktiles_all>1:
        kps=(ktiles_all+splits-1)//splits; S=(ktiles_all+kps-1)//kps
    ws=np.full((S,M,N),np.nan)
    kbias=bias if S==1 else np.zeros(N)
    kacc=acc_mode if S==1 else 0
    for pid,y in [(p,y) for y in range(S) for p in range(tiles_m*tiles_n)]:
        C=Cfinal if S==1 else ws[y]
        kt0=y*kps; ktiles_here=max(0,min(ktiles_all-kt0,kps))
        per_group=8*tiles_n; first_m=(pid//per_group)*8; gsize=min(tiles_m-first_m,8)
        tm=first_m+(pid%per_group)%gsize; tn=(pid%per_group)//gsize; m0=tm*BM; n0=tn*BN
        smem=np.full((STAGES,STAGE_BYTES//4),np.nan)
        def load_op(stage,dst,src,lim,row0,kt,mn):
            for tid in range(256):
                if not mn:
                    c=tid&7; k=kt*BK+c*4
                    for i in range(4):
                        r=(tid>>3)+32*i; grow=row0+r; d=(dst+r*STRIDE+c*16)//4
                        vals=np.zeros(4)
                        if vec:
                            if grow<lim and k<K: vals=src[grow,k:k+4]; assert len(vals)==4
                        elif grow<lim:
                            for e in range(4):
                                if k+e<K: vals[e]=src[grow,k+e]
                        smem[stage,d:d+4]=vals
                else:
                    mc=tid&31; gm=row0+mc*4
                    for i in range(4):
                        kr=(tid>>5)+8*i; gk=kt*BK+kr; d=(dst+kr*MN_STRIDE+mc*16)//4
                        vals=np.zeros(4)
                        if vec:
                            if gk<K and gm<lim: vals=src[gk,gm:gm+4]; assert len(vals)==4
                        elif gk<K:
                            for e in range(4):
                                if gm+e<lim: vals[e]=src[gk,gm+e]
                        smem[stage,d:d+4]=vals
        def load(stage,kt):
            load_op(stage,0,Ast,M,m0,kt0+kt,a_mn); load_op(stage,B_OFF,Bst,N,n0,kt0+kt,b_mn)
        def ldm(stage,addrs):
            out=[[None]*4 for _ in range(32)]
            for j in range(4):
                for t in range(32):
                    a=addrs[8*j+t//4]; assert a%16==0
                    out[t][j]=smem[stage,(a+4*(t%4))//4]
            return out
        def lds(stage,addr):
            assert addr%4==0; return smem[stage,addr//4]
        ktiles=ktiles_here
        acc=np.zeros((8,32,4,4,4))
        for s in range(STAGES-1):
            if s<ktiles: load(s,s)
        for kt in range(ktiles):
            nk=kt+STAGES-1; st=kt%STAGES
            for warp in range(8):
                wm=warp>>2; wn=warp&3
                for kk in range(4):
                    a=[[[0]*4 for _ in range(4)] for _ in range(32)]  # a[lane][mt][v]
                    b=[[[0]*2 for _ in range(4)] for _ in range(32)]
                    if not a_mn:
                        a_off=[(wm*64+(l&15))*STRIDE+(l>>4)*16 for l in range(32)]
                        for mt in range(4):
                            r=ldm(st,[a_off[l]+mt*16*STRIDE+kk*32 for l in range(32)])
                            for l in range(32): a[l][mt]=r[l]
                    else:
                        for l in range(32):
                            g=l>>2; t=l&3; ap=t*MN_STRIDE+(wm*64+g)*4+kk*8*MN_STRIDE
                            for mt in range(4):
                                a[l][mt]=[lds(st,ap+mt*64),lds(st,ap+mt*64+32),lds(st,ap+4*MN_STRIDE+mt*64),
                                          lds(st,ap+4*MN_STRIDE+mt*64+32)]
                    if not b_mn:
                        b_off=[B_OFF+(wn*32+(l&7)+((l>>4)<<3))*STRIDE+((l>>3)&1)*16 for l in range(32)]
                        for np_ in range(2):
                            r=ldm(st,[b_off[l]+np_*16*STRIDE+kk*32 for l in range(32)])
                            for l in range(32):
                                b[l][2*np_]=[r[l][0],r[l][1]]; b[l][2*np_+1]=[r[l][2],r[l][3]]
                    else:
                        for l in range(32):
                            g=l>>2; t=l&3; bp=B_OFF+t*MN_STRIDE+(wn*32+g)*4+kk*8*MN_STRIDE
                            for nt in range(4): b[l][nt]=[lds(st,bp+nt*32),lds(st,bp+4*MN_STRIDE+nt*32)]
                    for mt in range(4):
                        for nt in range(4):
                            Am=np.zeros((16,8)); Bm=np.zeros((8,8))
                            for l in range(32):
                                g=l>>2; t=l&3; av=a[l][mt]
                                Am[g,t]=av[0]; Am[g+8,t]=av[1]; Am[g,t+4]=av[2]; Am[g+8,t+4]=av[3]
                                Bm[t,g]=b[l][nt][0]; Bm[t+4,g]=b[l][nt][1]
                            D=Am@Bm
                            for l in range(32):
                                g=l>>2; t=l&3
                                acc[warp,l,mt,nt]+=[D[g,2*t],D[g,2*t+1],D[g+8,2*t],D[g+8,2*t+1]]
            if nk<ktiles: load(nk%STAGES,nk)
        for warp in range(8):
            wm=warp>>2; wn=warp&3
            for l in range(32):
                g=l>>2; t=l&3
                for nt in range(4):
                    col=n0+wn*32+nt*8+2*t
                    if col>=N: continue
                    for mt in range(4):
                        for h in range(2):
                            row=m0+wm*64+mt*16+g+8*h
                            if row>=M: continue
                            for q in range(2):
                                if col+q>=N: continue
                                v=acc[warp,l,mt,nt,2*h+q]+kbias[col+q]
                                C[row,col+q]=C[row,col+q]+v if kacc else v
    if S>1:
        assert not np.isnan(ws).any(), "unwritten workspace"
        v=ws.sum(axis=0)+bias
        Cfinal=Cfinal+v if acc_mode else v
    C=Cfinal
    ref=Al@Bl.T+bias+(C0 if acc_mode else 0)
    assert not np.isnan(C).any(), "unwritten/NaN"
    err=np.abs(C-ref).max()
    print("tf32 a_mn=%d b_mn=%d"%(a_mn,b_mn), M,N,K,"vec" if vec else "scalar","acc" if acc_mode else "set",
          "splits %d (kt/split %d)"%(S,kps),"maxerr",err)
    assert err==0
for (a_mn,b_mn) in ((0,1),(1,1)):
    run_layout(a_mn,b_mn,136,132,100,True,1)    # M, N multiples of 4 (MN-major vec), K % 4 == 0
    run_layout(a_mn,b_mn,131,129,75,False,1)    # scalar edges everywhere
    run_layout(a_mn,b_mn,40,260,33,False,0)
run_layout(0,0,136,132,100,True,1)
run_layout(1,1,132,136,300,True,1,splits=3)    # TN split-K: 10 K tiles -> 3 splits of 4, 4, 2
run_layout(1,1,131,129,290,False,0,splits=4)   # scalar, K tail inside the last split
run_layout(0,1,130,200,333,False,1,splits=16)  # more splits asked than K tiles allow: 11 splits of 1
