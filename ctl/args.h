/* args: the operator's input to tallyctl: a command's options and operand, the global
 * options, names, URLs, numbers and tags. Pure but for what it prints (usage errors, a
 * command's --help); tallyctl is single-threaded. */
#ifndef TALLY_ARGS_H
#define TALLY_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "ctl.h"

#define CTL_NAME_MAX     64
#define CTL_MODEL_MAX    128

int args_valid_name(const char *s);
int args_valid_model(const char *s);
int args_valid_backend(const char *s);
int args_valid_url(const char *s);
int args_check_name(const struct ctl_command *cmd, const char *what, const char *name);
int args_need_option(const struct ctl_command *cmd, const struct ctl_args *a);
size_t args_scan_digits(const char *s, int64_t max, int64_t *v);
int args_parse_int(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s, int64_t min,
                   int64_t max, const char *hint, int64_t *out);
int args_parse_usd(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s, int64_t *out);
int args_parse_word(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s,
                    const char *const *words, size_t n, size_t *index);
int args_parse_yes_no(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s,
                      int64_t *out);
int args_parse_tags(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s, char *out);
int args_check_tag(const struct ctl_command *cmd, const char *s);
int args_parse(const struct ctl_command *cmd, int argc, char **argv, struct ctl_args *a);
int args_global_opt(const char *name, int argc, char **argv, int *i, const char **out);

#endif
