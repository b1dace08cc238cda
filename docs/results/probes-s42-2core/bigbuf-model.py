import random
def sim(ops, T, seed=1):
    rng = random.Random(seed)
    lo, hi = 5, 25
    res = [0.0]*20; size=[0.0]*20
    faults = 0.0; peak = 0.0
    for k in range(20):
        r = rng.uniform(lo,hi); res[k]=r; size[k]=r; faults += r
    peak = sum(res)
    for _ in range(ops):
        k = rng.randrange(20); r = rng.uniform(lo,hi)
        R = res[k]
        # reuse the freed mapping for r
        if r > R: faults += r - R; R = r
        if R - r > T: R = r + T   # trim the tail beyond r+T
        res[k] = R
        peak = max(peak, sum(res))
    return peak, faults
for ops in (500, 2000):
    for T in (100, 12, 10, 8, 6, 4, 2, 0):
        p = [sim(ops,T,s) for s in range(5)]
        print(ops, T, "peak %.0f MiB  faults %.0f MiB" % (sum(x[0] for x in p)/5, sum(x[1] for x in p)/5))
