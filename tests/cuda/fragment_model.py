#!/usr/bin/env python3
# A CPU model of the register-level data movement the GEMM kernels rely on (no GPU needed): the TN kernel's
# swizzled shared memory + ldmatrix addressing against the mma.sync fragment layouts of the PTX ISA, and the
# weight-only kernels' lane-to-k mapping (int4 nibble pairs matched by PRMT) pushed through mma m16n8k16.
# Run: python3 tests/cuda/fragment_model.py (needs numpy). It mirrors the index arithmetic in
# cuda/frugal/cuda/gemm/kernel/{gemm_tn_sm80,weight_only_sm80}.cuh; keep the two in step.
import numpy as np
rng=np.random.default_rng(1)
# ---- TN kernel: smem swizzle + ldmatrix addressing -> mma fragments (byte level, int8 view)
def swz(r,c): return r*128+((c^(r&7))<<4)
BM,BN,WM,WN=128,128,2,4
TM,TN=BM//WM,BN//WN; MF,NF=TM//16,TN//8
A=rng.integers(0,256,(BM,128),dtype=np.uint8); B=rng.integers(0,256,(BN,128),dtype=np.uint8)
sa=np.zeros(BM*128,np.uint8); sb=np.zeros(BN*128,np.uint8)
for r in range(BM):
  for c in range(8): sa[swz(r,c):swz(r,c)+16]=A[r,c*16:c*16+16]
for r in range(BN):
  for c in range(8): sb[swz(r,c):swz(r,c)+16]=B[r,c*16:c*16+16]
def ldmatrix_x4(smem,addrs):
  # addrs[lane] = row address; matrix j rows from lanes 8j..8j+7; thread t gets reg j = 4 bytes of row t//4 at (t%4)*4
  regs=np.zeros((32,4,4),np.uint8)
  for t in range(32):
    for j in range(4):
      a=addrs[8*j+t//4]; regs[t,j]=smem[a+(t%4)*4:a+(t%4)*4+4]
  return regs
ok=True
for warp in range(WM*WN):
  wm,wn=warp//WN,warp%WN
  for ks in range(4):
    for i in range(MF):
      addrs=[swz(wm*TM+(l&7)+(((l>>3)&1)<<3)+i*16, ks*2+(l>>4)) for l in range(32)]
      regs=ldmatrix_x4(sa,addrs)
      for l in range(32):
        gid,tig=l>>2,l&3
        for reg in range(4):
          row=gid+(8 if reg&1 else 0); kb=tig*4+(16 if reg&2 else 0)
          exp=A[wm*TM+i*16+row, ks*32+kb:ks*32+kb+4]
          if not (regs[l,reg]==exp).all(): ok=False
    for j in range(0,NF,2):
      addrs=[swz(wn*TN+(l&7)+((l>>4)<<3)+j*8, ks*2+((l>>3)&1)) for l in range(32)]
      regs=ldmatrix_x4(sb,addrs)
      for l in range(32):
        gid,tig=l>>2,l&3
        for reg in range(4):
          nf=j+(reg>>1); half=reg&1
          exp=B[wn*TN+nf*8+gid, ks*32+tig*4+16*half: ks*32+tig*4+16*half+4]
          if not (regs[l,reg]==exp).all(): ok=False
# bank conflicts per ldmatrix phase (8 addresses) : distinct 16B bank groups
conf=0
for warp in range(WM*WN):
  wm=warp//WN
  for ks in range(4):
    addrs=[swz(wm*TM+(l&7)+(((l>>3)&1)<<3), ks*2+(l>>4)) for l in range(32)]
    for j in range(4):
      g=[(addrs[8*j+q]%128)//16 for q in range(8)]
      if len(set(g))!=8: conf+=1
print("TN fragments ok:",ok,"ldmatrix phases with conflicts:",conf)

# ---- weight-only int4: lane dequant + PRMT pairing, emulated through mma m16n8k16 semantics
def mma_f16(a,b):  # a[lane][4 regs][2 halves], b[lane][2][2] -> D[16][8]
  Am=np.zeros((16,16)); Bm=np.zeros((16,8))
  for l in range(32):
    gid,tig=l>>2,l&3
    for reg in range(4):
      row=gid+(8 if reg&1 else 0); col=tig*2+(8 if reg&2 else 0)
      Am[row,col:col+2]=a[l][reg]
    for reg in range(2):
      k=tig*2+8*reg; Bm[k:k+2,gid]=b[l][reg]
  return Am@Bm
K=128  # one warp step for int4 (4 lanes x 32)
X=rng.standard_normal((16,K)); Q=rng.integers(-8,8,(8,K))
packed=np.zeros((8,K//2),np.uint8)
for n in range(8):
  for j in range(K//2):
    packed[n,j]=(Q[n,2*j]&0xF)|((Q[n,2*j+1]&0xF)<<4)
D=np.zeros((16,8))
for wi in range(4):
  for st in range(2):
    a=[];b=[]
    for l in range(32):
      gid,tig=l>>2,l&3
      k0=tig*32
      word=int.from_bytes(packed[gid,k0//2+4*wi:k0//2+4*wi+4].tobytes(),'little')
      def deq(sh):
        v=(word>>sh)&0x000F000F
        lo=((v&0xF)^8)-8; hi=(((v>>16)&0xF)^8)-8
        return (lo,hi)
      bq=[deq(4*q) for q in range(4)]
      xs=lambda row: X[row,k0+8*wi:k0+8*wi+8]
      def pairs(row):
        x=xs(row)  # x0..x7; regs r0=(x0,x1) r1=(x2,x3) r2=(x4,x5) r3=(x6,x7)
        lo,hi=(x[0:2],x[4:6]) if st==0 else (x[2:4],x[6:8])
        return (lo[0],hi[0]),(lo[1],hi[1])   # 0x5410 -> (lo.l, hi.l), 0x7632 -> (lo.h, hi.h)
      p0=pairs(gid); p1=pairs(gid+8)
      a.append([p0[0],p1[0],p0[1],p1[1]]); b.append([bq[2*st],bq[2*st+1]])
    D+=mma_f16(a,b)
ref=X@Q.T
print("w4 mapping max err:",np.abs(D-ref).max())
# ---- weight-only int8
K=64; Q=rng.integers(-128,128,(8,K)); D=np.zeros((16,8))
for wi in range(4):
  a=[];b=[]
  for l in range(32):
    gid,tig=l>>2,l&3; k0=tig*16+4*wi
    w=Q[gid,k0:k0+4]
    b.append([(w[0],w[1]),(w[2],w[3])])
    xa=X[gid,k0:k0+4]; xb=X[gid+8,k0:k0+4]
    a.append([(xa[0],xa[1]),(xb[0],xb[1]),(xa[2],xa[3]),(xb[2],xb[3])])
  D+=mma_f16(a,b)
print("w8 mapping max err:",np.abs(D-X[:, :64]@Q.T).max())
# int8 fp16 magic: 1024+(w^0x80) - 1152 == w
import struct
def h(bits): return np.frombuffer(struct.pack('<H',bits),np.float16)[0]
print("s8 magic ok:", all(float(h(0x6400|((w&0xFF)^0x80)))-1152==w for w in range(-128,128)))
print("s4 magic ok:", all(float(h(((q&0xF)^0x6408)))-1032==q for q in range(-8,8)))
