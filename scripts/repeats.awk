# repeats.awk: writes out the repeated blocks of an HAProxy configuration, which has no
# loop. A block is
#     # BEGIN repeat N x U: <why>
#     <U lines, the unit>
#     ... (whatever was there)
#     # END repeat
# and comes out as its BEGIN line, the unit N times and its END line; everything else
# passes unchanged. `make haproxy-repeats` rewrites haproxy/tally.cfg with it, and
# tests/test_contract.py checks that the file is what it writes.
/^[ \t]*# BEGIN repeat [0-9]+ x [0-9]+:/ {
	print
	split($0, w, " ")
	for (i = 1; w[i] != "repeat"; i++)
		;
	n = w[i + 1] + 0; u = w[i + 3] + 0
	for (k = 0; k < u; k++)
		if ((getline unit[k]) <= 0) { print "repeats.awk: a block ends early" > "/dev/stderr"; exit 1 }
	for (j = 0; j < n; j++)
		for (k = 0; k < u; k++)
			print unit[k]
	skip = 1
	next
}
skip && /^[ \t]*# END repeat/ { skip = 0 }
!skip { print }
