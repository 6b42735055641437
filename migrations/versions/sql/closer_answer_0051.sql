-- closer_answer(): the raters' usual answer on PostgreSQL in one call. This file is the
-- function's one source: app/scheduling/answer_function.py calls it, and a migration
-- installs a frozen copy of it (migrations/versions/sql/closer_answer_NNNN.sql) whenever
-- it changes; tests/test_answer_paths.py checks that the installed function is this text
-- and that every enum code below (each marked /* Enum.member */) is the Python enum's.
--
-- It runs the common case (a rater answers the unanswered, non-check query they were
-- served) with the same rules as the Python scheduler (app/scheduling/service.py), and
-- the same random draws (app/scheduling/draws.py: p_draw, p_left_is_lo, p_candidates,
-- and the draws ahead: p_ahead_draw, p_ahead_repeat, p_ahead_candidates).
-- The next query is the one decided as the answered one was served (its upcoming_*
-- columns: app/scheduling/upcoming.py), and the query after it is decided now, from the
-- draws ahead, and stored with it.
-- For every other case (a retry, an attention check, an unknown query or session, a
-- study or a screen of another format than triplets, a repeated question or a queue
-- that sorts to serve next, a query served before the next was decided with it) it
-- returns outcome 'full' having written nothing, and the Python path takes the
-- request.
-- The differential test runs the same scenarios through both and compares every row.

CREATE OR REPLACE FUNCTION closer_answer(
    p_slug text,
    p_token_hash text,
    p_assignment bigint,
    p_choice text,
    p_elapsed integer,
    p_now timestamptz,
    p_draw double precision,
    p_left_is_lo boolean,
    p_candidates bigint[],
    p_log_lock integer,
    p_ahead_draw double precision,
    p_ahead_repeat boolean,
    p_ahead_candidates bigint[]
) RETURNS TABLE (
    outcome text,
    settings_version integer,
    answers integer,
    build_id integer,
    routing_id integer,
    served_id bigint,
    anchor_id bigint,
    left_id bigint,
    right_id bigint,
    rater_arm text,
    next_purpose smallint,
    upcoming_anchor_id bigint,
    upcoming_lo_id bigint,
    upcoming_hi_id bigint
) LANGUAGE plpgsql AS $$
DECLARE
    who record;
    given record;
    leased record;
    counted integer;
    for_build integer;
    for_routing integer;
    chosen_lo boolean;
    purpose smallint;
    slot bigint;
    expires timestamptz;
    anchor bigint;
    first_id bigint;
    other_id bigint;
    lo bigint;
    hi bigint;
    served bigint;
    draw integer;
    ahead_purpose smallint;
    ahead_anchor bigint;
    ahead_lo bigint;
    ahead_hi bigint;
    queue_free boolean;
BEGIN
    SELECT r.id AS rater_id, r.excluded, r.screened_out_at, p.id AS project_id, p.settings_version,
           p.allow_cant_tell, p.answers_per_rater, p.attention_rate, p.random_share,
           p.lease_seconds, p.link_state, p.judgement, p.design_version, p.design_locked_at,
           r.arm
      INTO who
      FROM rater_sessions s JOIN raters r ON r.id = s.rater_id
      JOIN projects p ON p.id = r.project_id
     WHERE s.token_hash = p_token_hash AND p.public_slug = p_slug;
    -- A rater screened out by failed attention checks answers nothing more (the Python
    -- path shows them their code).
    -- A study of screens (any format but the triplet: app/formats) is served by the
    -- Python path.
    IF NOT FOUND OR who.screened_out_at IS NOT NULL
       OR who.judgement <> 'triplet' /* formats.TRIPLET */
       OR (p_choice = 'cant_tell' /* Choice.cant_tell */ AND NOT who.allow_cant_tell) THEN
        RETURN QUERY SELECT 'full', NULL::integer, NULL::integer, NULL::integer,
            NULL::integer, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text,
            NULL::smallint, NULL::bigint, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;

    UPDATE assignments a
       SET answered_at = p_now, choice = p_choice, response_time_ms = p_elapsed
     WHERE a.id = p_assignment AND a.rater_id = who.rater_id
       AND a.answered_at IS NULL AND a.purpose <> 4 /* Purpose.attention */
       AND a.format = 'triplet' /* formats.TRIPLET */
       -- The Python path serves a repeated question (its last places are counted by
       -- who holds them), and a build that sorts (sort_size > 1) asks its queries on
       -- sorting screens, which it serves too: such a next query is handed over. So is
       -- one of a kind the study's settings no longer ask (switched off since it was
       -- decided): the Python path decides again (upcoming.still_asked).
       AND CASE
           WHEN a.upcoming_purpose = 4 /* Purpose.attention */ THEN who.attention_rate > 0
           WHEN a.upcoming_purpose = 3 /* Purpose.random */ THEN who.random_share > 0
           WHEN a.upcoming_purpose = -1 /* models.FROM_QUEUE */ THEN
               who.attention_rate + who.random_share < 1 AND NOT EXISTS (
                   SELECT 1 FROM builds b
                    WHERE b.project_id = who.project_id AND b.sort_size > 1
                      AND b.status = 'running' /* BuildStatus.running */)
           ELSE false END
    RETURNING a.slot_id, a.anchor_id, a.lo_id, a.hi_id, a.left_is_lo, a.purpose,
              a.upcoming_purpose, a.upcoming_anchor_id, a.upcoming_lo_id, a.upcoming_hi_id
         INTO given;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'full', who.settings_version, NULL::integer, NULL::integer,
            NULL::integer, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text,
            NULL::smallint, NULL::bigint, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    chosen_lo := (p_choice = 'left' /* Choice.left */) = given.left_is_lo;

    -- The study's first answer under its design version locks that version: a change
    -- after it makes a new one (app/projects/versions.py).
    IF who.design_locked_at IS NULL THEN
        UPDATE projects p SET design_locked_at = p_now
         WHERE p.id = who.project_id AND p.design_locked_at IS NULL;
    END IF;

    UPDATE raters r
       SET answers = r.answers + 1,
           last_seen_at = p_now,
           completed_at = CASE
               WHEN who.answers_per_rater > 0 AND r.answers + 1 >= who.answers_per_rater
                    AND r.completed_at IS NULL THEN p_now
               ELSE r.completed_at END
     WHERE r.id = who.rater_id
    RETURNING r.answers INTO counted;

    IF given.slot_id IS NOT NULL THEN
        IF p_choice = 'cant_tell' /* Choice.cant_tell */ OR who.excluded THEN
            UPDATE query_slots s SET lease_rater_id = NULL, lease_expires_at = NULL
             WHERE s.id = given.slot_id AND s.lease_rater_id = who.rater_id;
        ELSE
            UPDATE query_slots s
               SET state = CASE WHEN s.state = 'open' /* SlotState.open */
                                THEN 'answered' /* SlotState.answered */ ELSE s.state END
             WHERE s.id = given.slot_id
            RETURNING s.build_id, s.routing_id INTO for_build, for_routing;
        END IF;
    END IF;

    -- The next query, unless the session is complete or the study's link is not open
    -- (the answer to a query already shown still counts).
    IF who.link_state = 'open' /* LinkState.open */
       AND NOT (who.answers_per_rater > 0 AND counted >= who.answers_per_rater) THEN
        expires := p_now + make_interval(secs => who.lease_seconds);
        -- The next query as decided when the answered one was served: a check or a
        -- random question (the one drawn then, if the rater was not served it since),
        -- or the queue's first free slot (else the random question drawn for it).
        purpose := given.upcoming_purpose;
        IF purpose = -1 /* models.FROM_QUEUE */ THEN
            UPDATE query_slots s
               SET lease_rater_id = who.rater_id, lease_expires_at = expires
             WHERE s.id = (
                SELECT q.id FROM query_slots q
                 WHERE q.project_id = who.project_id AND q.state = 'open' /* SlotState.open */
                   AND (q.lease_expires_at IS NULL OR q.lease_expires_at < p_now)
                   AND NOT EXISTS (
                       SELECT 1 FROM assignments x
                        WHERE x.rater_id = who.rater_id AND x.anchor_id = q.anchor_id
                          AND x.lo_id = q.lo_id AND x.hi_id = q.hi_id)
                 ORDER BY q.priority, q.id
                 LIMIT 1
                 FOR UPDATE SKIP LOCKED)
            RETURNING s.id, s.anchor_id, s.lo_id, s.hi_id, s.priority INTO leased;
            queue_free := FOUND;
            IF FOUND THEN
                slot := leased.id;
                purpose := leased.priority;
                anchor := leased.anchor_id;
                lo := leased.lo_id;
                hi := leased.hi_id;
            ELSE
                purpose := 3 /* Purpose.random */;
            END IF;
        END IF;
        IF slot IS NULL AND given.upcoming_anchor_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM assignments x
             WHERE x.rater_id = who.rater_id AND x.anchor_id = given.upcoming_anchor_id
               AND x.lo_id = given.upcoming_lo_id AND x.hi_id = given.upcoming_hi_id) THEN
            anchor := given.upcoming_anchor_id;
            lo := given.upcoming_lo_id;
            hi := given.upcoming_hi_id;
        END IF;
        IF slot IS NULL AND anchor IS NULL THEN
            -- Drawn items (anchor, p, q) in threes: the first the rater was never served.
            anchor := NULL;
            FOR draw IN 0 .. coalesce(array_length(p_candidates, 1), 0) / 3 - 1 LOOP
                first_id := CASE WHEN purpose = 4 /* Purpose.attention */ THEN p_candidates[3 * draw + 1]
                                 ELSE p_candidates[3 * draw + 2] END;
                other_id := p_candidates[3 * draw + 3];
                lo := least(first_id, other_id);
                hi := greatest(first_id, other_id);
                IF NOT EXISTS (
                    SELECT 1 FROM assignments x
                     WHERE x.rater_id = who.rater_id AND x.anchor_id = p_candidates[3 * draw + 1]
                       AND x.lo_id = lo AND x.hi_id = hi) THEN
                    anchor := p_candidates[3 * draw + 1];
                    EXIT;
                END IF;
            END LOOP;
        END IF;
        IF anchor IS NOT NULL THEN
            -- The query after it, decided now from the draws ahead: for a check or a
            -- random question, the first drawn candidate the rater was never served
            -- (nor is served now).
            ahead_purpose := CASE
                WHEN p_ahead_draw < who.attention_rate THEN 4 /* Purpose.attention */
                WHEN p_ahead_draw >= who.attention_rate + who.random_share
                    THEN -1 /* models.FROM_QUEUE */
                WHEN p_ahead_repeat THEN 6 /* Purpose.repeat */
                ELSE 3 /* Purpose.random */ END;
            IF ahead_purpose = 3 /* Purpose.random */ OR ahead_purpose = 4 /* Purpose.attention */
               -- The queue's turn asks a random question where the queue has nothing for
               -- the rater: as this lease found, or without one, as its open slots show.
               OR (ahead_purpose = -1 /* models.FROM_QUEUE */ AND NOT coalesce(queue_free, EXISTS (
                   SELECT 1 FROM query_slots q
                    WHERE q.project_id = who.project_id AND q.state = 'open' /* SlotState.open */)))
            THEN
                FOR draw IN 0 .. coalesce(array_length(p_ahead_candidates, 1), 0) / 3 - 1 LOOP
                    first_id := CASE WHEN ahead_purpose = 4 /* Purpose.attention */
                                     THEN p_ahead_candidates[3 * draw + 1]
                                     ELSE p_ahead_candidates[3 * draw + 2] END;
                    other_id := p_ahead_candidates[3 * draw + 3];
                    IF (p_ahead_candidates[3 * draw + 1], least(first_id, other_id),
                        greatest(first_id, other_id)) <> (anchor, lo, hi)
                       AND NOT EXISTS (
                        SELECT 1 FROM assignments x
                         WHERE x.rater_id = who.rater_id
                           AND x.anchor_id = p_ahead_candidates[3 * draw + 1]
                           AND x.lo_id = least(first_id, other_id)
                           AND x.hi_id = greatest(first_id, other_id)) THEN
                        ahead_anchor := p_ahead_candidates[3 * draw + 1];
                        ahead_lo := least(first_id, other_id);
                        ahead_hi := greatest(first_id, other_id);
                        EXIT;
                    END IF;
                END LOOP;
            END IF;
            INSERT INTO assignments (project_id, rater_id, slot_id, purpose, anchor_id, lo_id,
                                     hi_id, left_is_lo, served_at, expires_at, upcoming_purpose,
                                     upcoming_anchor_id, upcoming_lo_id, upcoming_hi_id)
            VALUES (who.project_id, who.rater_id, slot, purpose, anchor, lo, hi, p_left_is_lo,
                    p_now, expires, ahead_purpose, ahead_anchor, ahead_lo, ahead_hi)
            RETURNING id INTO served;
        END IF;
    END IF;

    -- The triplet last: the log's shared lock is then held only until the commit.
    IF p_choice <> 'cant_tell' /* Choice.cant_tell */ THEN
        PERFORM pg_advisory_xact_lock_shared(p_log_lock, who.project_id);
        INSERT INTO triplets (project_id, anchor_id, closer_id, farther_id, source, rater_id,
                              query_id, response_time_ms, created_at,
                              adaptive, arm, design_version)
        VALUES (who.project_id, given.anchor_id,
                CASE WHEN chosen_lo THEN given.lo_id ELSE given.hi_id END,
                CASE WHEN chosen_lo THEN given.hi_id ELSE given.lo_id END,
                'rater' /* TripletSource.rater */, who.rater_id, p_assignment, p_elapsed, p_now,
                given.purpose IN (0, 1, 2, 5) /* ADAPTIVE_PURPOSES */, who.arm,
                who.design_version);
    END IF;

    RETURN QUERY SELECT 'answered', who.settings_version, counted, for_build, for_routing,
        served, anchor,
        CASE WHEN p_left_is_lo THEN lo ELSE hi END,
        CASE WHEN p_left_is_lo THEN hi ELSE lo END, who.arm::text,
        given.upcoming_purpose, ahead_anchor, ahead_lo, ahead_hi;
END;
$$;
