# A Python training script as schedulers start it (torchrun train.py, no
# --no-python): writes one record line to $W_REC/<pid> with every variable
# torchrun's agent sets (the same line as worker.sh), prints its rank, and
# exits 0.
import os
import sys

VARS = ("LOCAL_RANK RANK GROUP_RANK ROLE_RANK ROLE_NAME LOCAL_WORLD_SIZE WORLD_SIZE "
        "GROUP_WORLD_SIZE ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT "
        "TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE").split()

rec = "pid=%d " % os.getpid() + " ".join("%s=%s" % (v, os.environ.get(v, "<unset>")) for v in VARS)
rec += " args=" + ",".join(sys.argv[1:])
d = os.environ["W_REC"]
tmp = os.path.join(d, ".%d" % os.getpid())
with open(tmp, "w") as f:
    f.write(rec + "\n")
os.rename(tmp, os.path.join(d, str(os.getpid())))
print("python worker rank %s of %s" % (os.environ["RANK"], os.environ["WORLD_SIZE"]))
