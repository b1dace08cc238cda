import random, sys
from pyeda.inter import ttvar, truthtable, espresso_tts, exprvars
random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 11
X = exprvars('x', n)
tot = 0
for rep in range(3):
    tts = []
    for k in range(4):
        outs = "".join(random.choice("0011-") for _ in range(2 ** n))
        tts.append(truthtable(X, outs))
    fs = espresso_tts(*tts)
    tot += sum(len(f.xs) if hasattr(f, "xs") else 1 for f in fs)
print(tot)
