/* Minimal unit-test harness shared by tests/unit/test_*.c.
 * Each test binary runs its cases in order, prints one line per failed check and a
 * closing "N passed, N failed" line, and exits non-zero if any check failed.
 * tests/test_unit.py runs every binary so that pytest's summary covers them. */
#ifndef TALLY_UNIT_H
#define TALLY_UNIT_H

#include <stdio.h>
#include <string.h>

static int unit_failed_checks;
static int unit_cases_passed;
static int unit_cases_failed;

#define CHECK(cond)                                                               \
	do {                                                                          \
		if (!(cond)) {                                                            \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			unit_failed_checks++;                                                 \
		}                                                                         \
	} while (0)

#define CHECK_EQ_INT(a, b)                                                        \
	do {                                                                          \
		long long unit_a_ = (long long)(a), unit_b_ = (long long)(b);             \
		if (unit_a_ != unit_b_) {                                                 \
			fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__,  \
			        __LINE__, #a, #b, unit_a_, unit_b_);                          \
			unit_failed_checks++;                                                 \
		}                                                                         \
	} while (0)

#define CHECK_EQ_STR(a, b)                                                        \
	do {                                                                          \
		const char *unit_a_ = (a), *unit_b_ = (b);                                \
		if (!unit_a_ || !unit_b_ || strcmp(unit_a_, unit_b_) != 0) {              \
			fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n",        \
			        __FILE__, __LINE__, #a, #b, unit_a_ ? unit_a_ : "(null)",     \
			        unit_b_ ? unit_b_ : "(null)");                                \
			unit_failed_checks++;                                                 \
		}                                                                         \
	} while (0)

#define RUN(fn)                                                                   \
	do {                                                                          \
		int unit_before_ = unit_failed_checks;                                    \
		fn();                                                                     \
		if (unit_failed_checks == unit_before_) {                                 \
			unit_cases_passed++;                                                  \
		} else {                                                                  \
			unit_cases_failed++;                                                  \
			fprintf(stderr, "FAIL %s\n", #fn);                                    \
		}                                                                         \
	} while (0)

#define UNIT_DONE()                                                               \
	(printf("%d passed, %d failed\n", unit_cases_passed, unit_cases_failed),      \
	 unit_cases_failed ? 1 : 0)

#endif
