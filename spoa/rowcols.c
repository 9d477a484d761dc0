/* rowcols: the usage row's columns as data (see rowcols.h). Pure; any thread. */
#include "rowcols.h"

#include "acct-t.h"

#define ROWCOL_ENTRY(column, kind, field)                                        \
	{ #column, ROWCOL_##kind, offsetof(struct acct_row, field),                \
	  sizeof(((struct acct_row *)0)->field) },

const struct rowcol rowcols[ROWCOL_COLUMNS] = { ROWCOLS(ROWCOL_ENTRY) };

int rowcol_is_text(enum rowcol_kind k)
{
	return k == ROWCOL_TEXT || k == ROWCOL_OUTCOME || k == ROWCOL_SOURCE ||
	       k == ROWCOL_FALLBACK;
}
