-- team_id: a team's id by name (filters take names).
SELECT id FROM teams WHERE name = :name;
