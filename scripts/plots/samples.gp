# samples.gp: one cell's per-rep times in rep order (left) and their histogram
# (right), to show warm-up drift and bimodal clock states a median hides.
# Variables (gnuplot -e): dat, hist, out, title_text.
set terminal pngcairo size 1200,450 font "sans,9"
set output out
set multiplot layout 1,2 title title_text noenhanced
set key off
set grid
set xlabel "rep"
set ylabel "ms"
plot dat using 1:2 with points pt 7 ps 0.6
set xlabel "ms"
set ylabel "reps"
set style fill solid 0.6 border -1
plot hist using 1:2:3 with boxes
unset multiplot
