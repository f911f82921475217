# cells.gp: one bar per passing cell, grouped (a gap and a colour per group),
# with the 95% bootstrap CI of the median as error bars.
# Variables (gnuplot -e): dir (prep.py's output), out (PNG path), title_text.
load dir."/meta.gp"
set terminal pngcairo size 1400,800 font "sans,9"
set output out
set title title_text noenhanced
set ylabel ylabel
if (use_log) { set logscale y }
set style fill solid 0.7 border -1
set boxwidth 0.8
set xtics rotate by -50 left noenhanced
set bmargin 16
set rmargin 24
set key off
set grid ytics
plot dir."/cells.dat" using 1:2:(int($5) % 8 + 1):xtic(6) with boxes lc variable, \
     "" using 1:2:3:4 with yerrorbars lc rgb "black" pt 0
