export PYTHONPATH=$PWD:/tmp/site
g=/tmp/teach; mkdir -p $g/b16 $g/b1 $g/ag
python3 results/cpu-general/hand_ops_set.py $g/b16 --seeds 1001-1024 --batch-sizes 16 > /dev/null 2>&1 &
python3 results/cpu-general/hand_ops_set.py $g/b1 --seeds 1001-1012 --batch-sizes 1 > /dev/null 2>&1 &
python3 results/cpu-general/hand_ops_set.py $g/ag --seeds 901-912 --batch-sizes 16 > /dev/null 2>&1 &
wait; rm -f $g/*/traits.json
for d in b16 b1 ag; do timeout 150 python3 results/static-detection/teacher_catalogs.py $g/$d $g/cat-$d --ep cuda --jobs 4 2>&1 | tail -1; done
tar -C $g -czf $OUT/teach.tgz cat-b16 cat-b1 cat-ag; ls -la $OUT; date -u
