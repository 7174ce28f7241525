#!/usr/bin/env bash
# i6: the backward side-by-side with grad_weight's rows kernel (final binary) and without it (i3's binary), PyTorch
# in the same command, o5's tuning cache; verify --backward on all nine with the final binary.
set -u
source .gpu/gpu-env.sh
d=$OUT/i6; mkdir -p $d
cp .gpu/tune_o5.json /tmp/tune_i6.json; chmod u+w /tmp/tune_i6.json
export CONVT_TUNE_CACHE=/tmp/tune_i6.json PYTHONUNBUFFERED=1
.gpu/convt_i5 verify --backward 2>&1 | cut -c1-200 > $d/verify.txt
.gpu/convt_i5 bench --backward --runs 20 --json $d/convt.json > /dev/null 2>&1
.gpu/convt_i3 bench --backward --runs 20 --json $d/convt_i3.json > /dev/null 2>&1
python3 scripts/torch_bench.py --backward --runs 20 --json $d/torch.json > /dev/null 2>&1
python3 scripts/side_by_side.py $d/convt.json $d/torch.json --md $d/table.md > /dev/null 2>&1
python3 scripts/side_by_side.py $d/convt_i3.json $d/torch.json --md $d/table_i3.md > /dev/null 2>&1
cat $d/verify.txt $d/table.md $d/table_i3.md
