-- team_names: every team's name, in id order: summary's group=team rows. Teams are few
-- (an operator makes each), so all of them in one read, with no list of ids to bind.
SELECT id, name FROM teams ORDER BY id;
