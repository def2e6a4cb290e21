set -x
which ncu nsys; ls /usr/local/cuda*/bin 2>/dev/null | grep -i -E "ncu|nsys|cuobjdump|nvdisasm"
export PYTHONPATH=src
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "NCU=$NCU"
if [ -n "$NCU" ]; then
  for dt in float32; do
  $NCU --kernel-name regex:"kf_merged|k0_gemv" --launch-skip 40 --launch-count 2 --section SpeedOfLight --section WarpStateStats --section InstructionStats --section LaunchStats --section SchedulerStats python scratch/ncu_cg.py cg 1024 $dt > $OUT/ncu_$dt.txt 2>&1
  $NCU --kernel-name regex:"kf_merged" --launch-skip 40 --launch-count 1 --set full --import-source no --page source --print-source sass python scratch/ncu_cg.py cg 1024 $dt > $OUT/ncu_sass_$dt.txt 2>&1
  done
fi
tail -5 $OUT/*.txt
