/* dbpg: the PostgreSQL backend of db.c (a postgresql:// store), through libpq. Its
 * connections and statements are used by one thread at a time, as db.h says. */
#ifndef TALLY_DBPG_H
#define TALLY_DBPG_H

struct db_ops;

extern const struct db_ops dbpg_ops;

#endif
