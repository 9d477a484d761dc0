/* priceimport: prices import: reads a tally or LiteLLM prices file, maps its prices
 * to rate cards of the configured models, writes them in one transaction and reports
 * what it did. tallyctl is single-threaded. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "priceimport.h"
#include "prices.h"
#include "tier.h"

#define CTL_CARDS_MAX    32                /* rate cards one imported model may have */
#define CTL_IMPORT_MAX   (256L << 20)      /* bytes of a prices import file */
#define CTL_XSTR(x)      #x
#define CTL_STR(x)       CTL_XSTR(x)

#define CTL_LITELLM_SEARCH        "search_context_cost_per_query"
#define CTL_LITELLM_SEARCH_MEDIUM "search_context_size_medium"
#define CTL_LITELLM_SAMPLE        "sample_spec"   /* the file's template, not a model */

struct priceimport {
	struct ctl *ctl;
	const char *file;
	int litellm;                  /* --format litellm */
	const cJSON *entries;         /* the file's models, keyed by name */
	const char *entry;            /* the name of the entry being read, for messages */
	cJSON *used;                  /* entries some configured model took, by name */
	cJSON *seen;                  /* unmapped fields of the entry being read */
	cJSON *report;                /* what is printed, text or JSON */
	struct prices_card cards[CTL_CARDS_MAX];
	int ncards;
};

static int priceimport_oom(void)
{
	ctl_error("out of memory");
	return -1;
}

/* Reports a bad value of field in the current entry. Returns -1. */
static int priceimport_bad(const struct priceimport *imp, const char *field, const char *expected)
{
	ctl_error("%s: model '%s': %s: expected %s", imp->file, imp->entry, field, expected);
	return -1;
}

/* Exact micro-dollars of v dollars times 10^scale (12: per token to per million tokens;
 * 6: per call), rounded to the nearest integer, halves up. Doubles do not hold 3e-06
 * exactly, so v is read back as the shortest decimal that parses to it, which is the
 * file's own text for every number of up to 15 significant digits, and that decimal is
 * scaled in integers. 0, or -1 if v is negative, not finite or above PRICES_MICROS_MAX. */
int priceimport_dollars_to_micros(double v, int scale, int64_t *out)
{
	char text[32], *p;
	int64_t m = 0, div = 1;
	int prec, digits = 0, exp;

	if (!isfinite(v) || v < 0)
		return -1;
	if (v == 0) {   /* -0 too, which would print a sign */
		*out = 0;
		return 0;
	}
	for (prec = 0; prec < 17; prec++) {   /* "%.16e" always reads back exactly */
		snprintf(text, sizeof(text), "%.*e", prec, v);
		if (strtod(text, NULL) == v)
			break;
	}
	/* text is D.DDDe[+-]XX: at most 17 digits, which int64 holds. */
	for (p = text; *p != 'e'; p++) {
		if (*p != '.') {
			m = m * 10 + (*p - '0');
			digits++;
		}
	}
	exp = atoi(p + 1) - (digits - 1) + scale;
	for (; exp > 0; exp--) {
		if (m > PRICES_MICROS_MAX)
			return -1;
		m *= 10;
	}
	if (exp < -18)   /* m < 10^17: under a tenth */
		m = 0;
	for (; exp < 0; exp++)
		div *= 10;
	m = (m + div / 2) / div;
	if (m > PRICES_MICROS_MAX)
		return -1;
	*out = m;
	return 0;
}

/* A tally-format integer: 0..max, integral. 0 or -1 (reported). */
static int priceimport_int(const struct priceimport *imp, const cJSON *item, const char *field,
                           int64_t max, int64_t *out)
{
	char expected[64];
	double v = item->valuedouble;

	if (!cJSON_IsNumber(item) || !isfinite(v) || v < 0 || v > (double)max ||
	    v != (double)(int64_t)v) {
		snprintf(expected, sizeof(expected), "an integer from 0 to %lld", (long long)max);
		return priceimport_bad(imp, field, expected);
	}
	*out = (int64_t)v;
	return 0;
}

/* A LiteLLM price in dollars, as micro-dollars scaled by 10^scale. 0 or -1 (reported). */
static int priceimport_dollars(const struct priceimport *imp, const cJSON *item, const char *field,
                               int scale, int64_t *out)
{
	if (!cJSON_IsNumber(item) || priceimport_dollars_to_micros(item->valuedouble, scale, out) < 0)
		return priceimport_bad(imp, field, scale == 12 ?
		                       "a non-negative finite number of dollars per token, below $1" :
		                       "a non-negative finite number of dollars, below $1000000");
	return 0;
}

/* Counts field as unmapped, once per entry. 0 or -1 (out of memory). */
static int priceimport_unmapped(struct priceimport *imp, const char *field)
{
	cJSON *fields = cJSON_GetObjectItemCaseSensitive(imp->report, "unmapped_fields"), *n;

	if (cJSON_GetObjectItemCaseSensitive(imp->seen, field))
		return 0;
	if (ctl_json_add(imp->seen, field, cJSON_CreateTrue()) < 0)
		return -1;
	n = cJSON_GetObjectItemCaseSensitive(fields, field);
	if (!n)
		return ctl_json_add(fields, field, cJSON_CreateNumber(1));
	cJSON_SetNumberValue(n, n->valuedouble + 1);
	return 0;
}

/* The card (tier, above) of the entry being read, added without prices if new; NULL
 * (reported) if there are too many. */
static struct prices_card *priceimport_card(struct priceimport *imp, const char *tier,
                                            int64_t above)
{
	struct prices_card *c;
	int i;

	for (i = 0; i < imp->ncards; i++) {
		if (imp->cards[i].above == above && strcmp(imp->cards[i].tier, tier) == 0)
			return &imp->cards[i];
	}
	if (imp->ncards == CTL_CARDS_MAX) {
		priceimport_bad(imp, tier, "at most " CTL_STR(CTL_CARDS_MAX) " rate cards");
		return NULL;
	}
	c = &imp->cards[imp->ncards++];
	*c = (struct prices_card){ .tier = tier, .above = above };
	return c;
}

/* s[0..n) ends with suffix. */
static int priceimport_ends_with(const char *s, size_t n, const char *suffix)
{
	size_t len = strlen(suffix);

	return n >= len && memcmp(s + n - len, suffix, len) == 0;
}

/* Splits a LiteLLM key, <price>[_above_<N>k_tokens][_priority|_flex], into the index
 * of its price in prices_fields, its tier and its prompt size. -1: not a price mapped. */
int priceimport_litellm_key(const char *key, const char **tier, int64_t *above)
{
	size_t n = strlen(key), d;
	int i;

	*tier = "default";
	if (priceimport_ends_with(key, n, "_priority")) {
		*tier = "priority";
		n -= strlen("_priority");
	} else if (priceimport_ends_with(key, n, "_flex")) {
		*tier = "flex";
		n -= strlen("_flex");
	}
	*above = 0;
	if (priceimport_ends_with(key, n, "k_tokens")) {
		d = n - strlen("k_tokens");
		while (d > 0 && key[d - 1] >= '0' && key[d - 1] <= '9')
			d--;
		/* At most 9 digits: thousands of tokens below PRICES_TOKENS_MAX. */
		if (d < n - strlen("k_tokens") && n - strlen("k_tokens") - d <= 9 &&
		    priceimport_ends_with(key, d, "_above_")) {
			args_scan_digits(key + d, PRICES_TOKENS_MAX, above);
			*above *= 1000;
			n = d - strlen("_above_");
		}
	}
	for (i = 0; i < PRICE_CLASSES; i++) {
		if (prices_fields[i].litellm && strlen(prices_fields[i].litellm) == n &&
		    memcmp(prices_fields[i].litellm, key, n) == 0)
			return i;
	}
	return -1;
}

/* Reads a LiteLLM entry into imp->cards. 0 or -1 (reported). */
static int priceimport_litellm(struct priceimport *imp, const cJSON *entry)
{
	const cJSON *m, *sub;
	struct prices_card *c;
	char field[256];
	int64_t search = 0, v, above;
	int i, has_search = 0;
	const char *tier;

	if (!cJSON_IsObject(entry))
		return priceimport_bad(imp, "its value", "an object");
	cJSON_ArrayForEach(m, entry) {
		if (strcmp(m->string, CTL_LITELLM_SEARCH) == 0 && !cJSON_IsNull(m)) {
			if (!cJSON_IsObject(m))
				return priceimport_bad(imp, m->string, "an object of dollars per search");
			cJSON_ArrayForEach(sub, m) {
				snprintf(field, sizeof(field), "%s.%s", m->string, sub->string);
				if (strcmp(sub->string, CTL_LITELLM_SEARCH_MEDIUM) != 0) {
					if (priceimport_unmapped(imp, field) < 0)
						return priceimport_oom();
				} else if (!cJSON_IsNull(sub)) {
					if (priceimport_dollars(imp, sub, field, 6, &search) < 0)
						return -1;
					has_search = 1;
				}
			}
			continue;
		}
		i = priceimport_litellm_key(m->string, &tier, &above);
		if (i < 0) {
			if (strstr(m->string, "cost") && priceimport_unmapped(imp, m->string) < 0)
				return priceimport_oom();
			continue;
		}
		if (cJSON_IsNull(m))
			continue;
		if (priceimport_dollars(imp, m, m->string, 12, &v) < 0 ||
		    !(c = priceimport_card(imp, tier, above)))
			return -1;
		c->price[i] = v;
		c->known |= 1u << i;
	}
	/* A search costs the same at every tier and prompt size: on each card. */
	if (has_search && !priceimport_card(imp, "default", 0))
		return -1;
	for (i = 0; has_search && i < imp->ncards; i++) {
		imp->cards[i].price[PRICE_WEB_SEARCH] = search;
		imp->cards[i].known |= 1u << PRICE_WEB_SEARCH;
	}
	return 0;
}

/* Reads a tally-format entry, an array of cards, into imp->cards. 0 or -1 (reported). */
static int priceimport_tally(struct priceimport *imp, const cJSON *entry)
{
	const cJSON *card, *m;
	struct prices_card *c;
	const char *tier;
	int64_t above;
	int i, n;

	if (!cJSON_IsArray(entry))
		return priceimport_bad(imp, "its value", "an array of rate cards");
	cJSON_ArrayForEach(card, entry) {
		if (!cJSON_IsObject(card))
			return priceimport_bad(imp, "a rate card", "an object");
		m = cJSON_GetObjectItemCaseSensitive(card, "tier");
		tier = m ? cJSON_GetStringValue(m) : "default";
		if (!tier || !tier_name_ok(tier, strlen(tier)))
			return priceimport_bad(imp, "tier", "1-23 characters from a-z 0-9 _ -");
		m = cJSON_GetObjectItemCaseSensitive(card, "above_tokens");
		above = 0;
		if (m && priceimport_int(imp, m, "above_tokens", PRICES_TOKENS_MAX, &above) < 0)
			return -1;
		n = imp->ncards;
		if (!(c = priceimport_card(imp, tier, above)))
			return -1;
		if (imp->ncards == n)
			return priceimport_bad(imp, tier, "one rate card per tier and above_tokens");
		cJSON_ArrayForEach(m, card) {
			if (strcmp(m->string, "tier") == 0 || strcmp(m->string, "above_tokens") == 0)
				continue;
			for (i = 0; i < PRICE_CLASSES && strcmp(pricecard_columns[i], m->string) != 0; i++)
				;
			if (i == PRICE_CLASSES) {
				if (priceimport_unmapped(imp, m->string) < 0)
					return priceimport_oom();
			} else if (!cJSON_IsNull(m)) {
				if (priceimport_int(imp, m, m->string, PRICES_MICROS_MAX, &c->price[i]) < 0)
					return -1;
				c->known |= 1u << i;
			}
		}
	}
	return 0;
}

/* Appends the string s (or, with s2, the object {"model": s, "entry": s2}) to the
 * report's array member. 0 or -1 (out of memory). */
static int priceimport_note(struct priceimport *imp, const char *member, const char *s,
                            const char *s2)
{
	cJSON *arr = cJSON_GetObjectItemCaseSensitive(imp->report, member), *o;

	if (!s2)
		return ctl_json_add(arr, NULL, cJSON_CreateString(s));
	o = cJSON_CreateObject();
	if (ctl_json_add(arr, NULL, o) < 0 || ctl_json_add(o, "model", cJSON_CreateString(s)) < 0)
		return -1;
	return ctl_json_add(o, "entry", cJSON_CreateString(s2));
}

/* The file's entry for the configured model name into *out: the entry of that name,
 * else (LiteLLM) the only one named PREFIX/name, else NULL; notes in the report how it
 * was found or why not. 0 or -1 (out of memory). */
static int priceimport_entry(struct priceimport *imp, const char *name, const cJSON **out)
{
	const cJSON *e, *found = cJSON_GetObjectItemCaseSensitive(imp->entries, name);
	size_t n = strlen(name), len;
	int candidates = 0;

	*out = found;
	if (found)
		return 0;
	for (e = imp->litellm ? imp->entries->child : NULL; e; e = e->next) {
		len = strlen(e->string);
		if (len > n && e->string[len - n - 1] == '/' && strcmp(e->string + len - n, name) == 0) {
			found = e;
			candidates++;
		}
	}
	if (candidates > 1)
		return priceimport_note(imp, "ambiguous", name, NULL);
	if (!found)
		return priceimport_note(imp, "not_in_file", name, NULL);
	*out = found;
	return priceimport_note(imp, "prefix_matches", name, found->string);
}

/* Adds n to the report's number member. */
static void priceimport_count(struct priceimport *imp, const char *member, int n)
{
	cJSON *item = cJSON_GetObjectItemCaseSensitive(imp->report, member);

	cJSON_SetNumberValue(item, item->valuedouble + n);
}

/* Reads the entry of configured model id, name and writes its cards. 0 or -1 (reported). */
static int priceimport_model(struct priceimport *imp, int64_t id, const char *name)
{
	const cJSON *entry;
	int i;

	if (priceimport_entry(imp, name, &entry) < 0)
		return priceimport_oom();
	if (!entry)
		return 0;
	imp->entry = entry->string;
	imp->ncards = 0;
	cJSON_Delete(imp->seen);
	imp->seen = cJSON_CreateObject();
	if (!imp->seen || (!cJSON_GetObjectItemCaseSensitive(imp->used, entry->string) &&
	                   ctl_json_add(imp->used, entry->string, cJSON_CreateTrue()) < 0))
		return priceimport_oom();
	if ((imp->litellm ? priceimport_litellm(imp, entry) : priceimport_tally(imp, entry)) < 0)
		return -1;
	if (imp->ncards == 0)
		return priceimport_note(imp, "no_mapped_prices", name, NULL) < 0 ? priceimport_oom() : 0;
	for (i = 0; i < imp->ncards; i++) {
		if (prices_card_write(imp->ctl, id, &imp->cards[i], 0) < 0)
			return -1;
	}
	if (prices_warn_unpriced(imp->ctl, id, name) < 0)
		return -1;
	priceimport_count(imp, "models_priced", 1);
	priceimport_count(imp, "cards_written", imp->ncards);
	return 0;
}

/* The report's skeleton: every member, empty. 0 or -1 (out of memory). */
static int priceimport_report_new(struct priceimport *imp, const char *format, int dry_run)
{
	static const char *const lists[] = { "prefix_matches", "ambiguous", "no_mapped_prices",
	                                     "not_in_file", "not_configured" };
	size_t i;

	imp->used = cJSON_CreateObject();
	imp->report = cJSON_CreateObject();
	if (!imp->used || ctl_json_add(imp->report, "file", cJSON_CreateString(imp->file)) < 0 ||
	    ctl_json_add(imp->report, "format", cJSON_CreateString(format)) < 0 ||
	    ctl_json_add(imp->report, "dry_run", cJSON_CreateBool(dry_run)) < 0 ||
	    ctl_json_add(imp->report, "models_priced", cJSON_CreateNumber(0)) < 0 ||
	    ctl_json_add(imp->report, "cards_written", cJSON_CreateNumber(0)) < 0)
		return -1;
	for (i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		if (ctl_json_add(imp->report, lists[i], cJSON_CreateArray()) < 0)
			return -1;
	}
	return ctl_json_add(imp->report, "unmapped_fields", cJSON_CreateObject());
}

/* The report as text: counts, and the names of the lists marked always (the others
 * with --verbose). */
static void priceimport_print(const cJSON *report, int verbose)
{
	static const struct {
		const char *member, *label;
		int always;
	} lists[] = {
		{ "prefix_matches", "matched after a provider prefix", 1 },
		{ "ambiguous", "not priced, several provider-prefixed entries", 1 },
		{ "no_mapped_prices", "configured, without a price this format maps", 1 },
		{ "not_in_file", "configured, not in the file", 0 },
		{ "not_configured", "in the file, not configured", 0 },
	};
	const cJSON *list, *e;
	size_t i;

	printf("prices import %s (%s)%s\n", cJSON_GetObjectItemCaseSensitive(report, "file")->valuestring,
	       cJSON_GetObjectItemCaseSensitive(report, "format")->valuestring,
	       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(report, "dry_run")) ?
	       ": dry run, nothing written" : "");
	printf("models priced: %d\ncards written: %d\n",
	       (int)cJSON_GetObjectItemCaseSensitive(report, "models_priced")->valuedouble,
	       (int)cJSON_GetObjectItemCaseSensitive(report, "cards_written")->valuedouble);
	for (i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		list = cJSON_GetObjectItemCaseSensitive(report, lists[i].member);
		printf("%s: %d\n", lists[i].label, cJSON_GetArraySize(list));
		if (!lists[i].always && !verbose)
			continue;
		cJSON_ArrayForEach(e, list) {
			if (cJSON_IsString(e))
				printf("  %s\n", e->valuestring);
			else
				printf("  %s <- %s\n",
				       cJSON_GetObjectItemCaseSensitive(e, "model")->valuestring,
				       cJSON_GetObjectItemCaseSensitive(e, "entry")->valuestring);
		}
	}
	list = cJSON_GetObjectItemCaseSensitive(report, "unmapped_fields");
	printf("unmapped price fields: %d\n", cJSON_GetArraySize(list));
	cJSON_ArrayForEach(e, list)
		printf("  %s: %d model%s\n", e->string, (int)e->valuedouble, e->valuedouble == 1 ? "" : "s");
}

/* Reads path whole and NUL-terminated into *out (the caller frees it). */
static int priceimport_read_file(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL, *grown;
	size_t cap = 0;
	int status = CTL_FAIL;

	*len = 0;
	if (!f)
		return ctl_error("cannot open %s: %s", path, strerror(errno));
	do {
		if (cap - *len < 2) {
			if (cap >= (size_t)CTL_IMPORT_MAX) {
				ctl_error("%s: larger than %ld bytes", path, CTL_IMPORT_MAX);
				goto out;
			}
			cap = cap ? cap * 2 : 65536;
			grown = realloc(buf, cap);
			if (!grown) {
				ctl_error("out of memory");
				goto out;
			}
			buf = grown;
		}
		*len += fread(buf + *len, 1, cap - *len - 1, f);
	} while (!feof(f) && !ferror(f));
	if (ferror(f)) {
		ctl_error("cannot read %s: %s", path, strerror(errno));
		goto out;
	}
	buf[*len] = '\0';
	*out = buf;
	buf = NULL;
	status = CTL_OK;
out:
	free(buf);
	fclose(f);
	return status;
}

/* Parses the file of imp into *root and finds its models in imp->entries. */
static int priceimport_parse(struct priceimport *imp, cJSON **root)
{
	const char *end = NULL, *p;
	char *text = NULL;
	size_t len;
	int line = 1, status = CTL_FAIL;

	if (priceimport_read_file(imp->file, &text, &len) != CTL_OK)
		return CTL_FAIL;
	if (strlen(text) != len) {
		ctl_error("%s: malformed JSON: a NUL byte at byte %zu", imp->file, strlen(text));
		goto out;
	}
	*root = cJSON_ParseWithOpts(text, &end, 1);
	if (!*root) {
		for (p = text; end && p < end; p++)
			line += *p == '\n';
		ctl_error("%s: malformed JSON at line %d (byte %ld)", imp->file, line,
		          end ? (long)(end - text) : 0L);
		goto out;
	}
	imp->entries = imp->litellm ? *root : cJSON_GetObjectItemCaseSensitive(*root, "models");
	if (!cJSON_IsObject(imp->entries)) {
		ctl_error(imp->litellm ? "%s: expected a JSON object keyed by model name" :
		          "%s: expected {\"models\": {\"NAME\": [card, ...]}} (a LiteLLM file needs "
		          "--format litellm)", imp->file);
		goto out;
	}
	status = CTL_OK;
out:
	free(text);
	return status;
}

/* The configured models, by name, into *out (the caller frees each name and out),
 * read whole before any card is written: a PostgreSQL connection runs one statement at
 * a time, so none may stay open while another runs. */
struct priceimport_model {
	int64_t id;
	char *name;
};

static int priceimport_models_read(struct ctl *ctl, struct priceimport_model **out, size_t *n)
{
#define MODELS_SQL(C) "SELECT id, name FROM models ORDER BY name" C
	struct db_stmt *st = ctl_prepare(ctl, ctl_sql_of(ctl, CTL_SQL(MODELS_SQL)), "");
#undef MODELS_SQL
	struct priceimport_model *grown;
	enum db_status rc = DB_DONE;
	const char *name;
	size_t cap = 0;
	int status = CTL_FAIL;

	*out = NULL;
	*n = 0;
	if (!st)
		return CTL_FAIL;
	while ((rc = db_step(st)) == DB_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			grown = realloc(*out, cap * sizeof(**out));
			if (!grown) {
				ctl_error("out of memory");
				goto out;
			}
			*out = grown;
		}
		(*out)[*n].id = db_col_int(st, 0);
		name = db_col_text(st, 1);
		(*out)[*n].name = strdup(name ? name : "");
		if (!(*out)[*n].name) {
			ctl_error("out of memory");
			goto out;
		}
		++*n;
	}
	if (rc != DB_DONE) {
		ctl_db_error(ctl);
		goto out;
	}
	status = CTL_OK;
out:
	db_finalize(st);
	return status;
}

static void priceimport_models_free(struct priceimport_model *models, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(models[i].name);
	free(models);
}

int priceimport_run(struct ctl *ctl, const struct ctl_args *a)
{
	static const char *const formats[] = { "tally", "litellm" };
	const char *format = a->val[OPT_FORMAT] ? a->val[OPT_FORMAT] : "tally";
	struct priceimport imp = { .ctl = ctl, .file = a->operand };
	struct priceimport_model *models = NULL;
	size_t nmodels = 0, i, which;
	cJSON *root = NULL;
	const cJSON *e;
	int status = CTL_FAIL;

	if (args_parse_word(ctl->cmd, OPT_FORMAT, format, formats, 2, &which) != CTL_OK)
		return CTL_USAGE;
	imp.litellm = which == 1;
	if (priceimport_parse(&imp, &root) != CTL_OK)
		goto out;
	if (priceimport_report_new(&imp, format, a->val[OPT_DRY_RUN] != NULL) < 0) {
		priceimport_oom();
		goto out;
	}
	/* One transaction: every card of the file, or none. */
	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		goto out;
	if (priceimport_models_read(ctl, &models, &nmodels) != CTL_OK)
		goto out;
	for (i = 0; i < nmodels; i++) {
		if (priceimport_model(&imp, models[i].id, models[i].name) < 0)
			goto out;
	}
	cJSON_ArrayForEach(e, imp.entries) {
		if ((imp.litellm && strcmp(e->string, CTL_LITELLM_SAMPLE) == 0) ||
		    cJSON_GetObjectItemCaseSensitive(imp.used, e->string))
			continue;
		if (priceimport_note(&imp, "not_configured", e->string, NULL) < 0) {
			priceimport_oom();
			goto out;
		}
	}
	if (a->val[OPT_DRY_RUN])
		ctl_rollback(ctl);
	else if (ctl_commit(ctl) != CTL_OK)
		goto out;
	if (a->val[OPT_JSON]) {
		status = ctl_json_print(imp.report, 0);
		imp.report = NULL;
	} else {
		priceimport_print(imp.report, a->val[OPT_VERBOSE] != NULL);
		status = CTL_OK;
	}
out:
	priceimport_models_free(models, nmodels);
	if (status != CTL_OK)
		ctl_rollback(ctl);
	cJSON_Delete(root);
	cJSON_Delete(imp.used);
	cJSON_Delete(imp.seen);
	cJSON_Delete(imp.report);
	return status;
}
