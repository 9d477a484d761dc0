/* recformat: prints the log-format of a "tally5" record, built from spoa/record.h's
 * field table, as haproxy/haproxy.cfg must hold it (tests/test_contract.py compares
 * the two). */
#include <stdio.h>

#include "record.h"

struct recformat_field {
	const char *printed;
	const char *var;
	int flags;
};

static const struct recformat_field recformat_fields[] = {
#define RECFORMAT_FIELD(name, printed, var, flags) { printed, var, flags },
	RECORD_FIELD_TABLE(RECFORMAT_FIELD)
#undef RECFORMAT_FIELD
};

/* The MAC: HMAC-SHA256 with HAProxy's secret of "tally5", the termination flag and
 * each MAC'd variable after a \x01 (record.c checks it field by field). */
static void recformat_mac(void)
{
	size_t i;

	printf("%%[str(tally5),concat(,proc.tally_term)");
	for (i = 0; i < sizeof(recformat_fields) / sizeof(recformat_fields[0]); i++)
		if (recformat_fields[i].flags & RECORD_MACD)
			printf(",concat(\\x01,%s)", recformat_fields[i].var);
	printf(",hmac(sha256,proc.tally_secret),base64]");
}

int main(void)
{
	size_t i;

	for (i = 0; i < sizeof(recformat_fields) / sizeof(recformat_fields[0]); i++) {
		const struct recformat_field *f = &recformat_fields[i];

		if (i)
			putchar(' ');
		if (f->printed)
			fputs(f->printed, stdout);
		else if (f->var)
			printf("%%[var(%s)%s]", f->var, f->flags & RECORD_URLENC ? ",url_enc" : "");
		else
			recformat_mac();
	}
	putchar('\n');
	return 0;
}
