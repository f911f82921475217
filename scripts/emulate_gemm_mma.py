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
