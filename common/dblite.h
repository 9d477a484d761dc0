/* dblite: the SQLite backend of db.c (a store that is a path). Its connections and
 * statements are used by one thread at a time, as db.h says. */
#ifndef TALLY_DBLITE_H
#define TALLY_DBLITE_H

struct db_ops;

extern const struct db_ops dblite_ops;

#endif
