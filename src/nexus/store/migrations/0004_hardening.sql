-- a dead letter is redriven at most once, by construction: the second claim of the same
-- dead letter violates the primary key (ALREADY_REDRIVEN), whatever the callers checked first.

CREATE TABLE dead_letter_redrives (
    dead_letter_id     bigint PRIMARY KEY REFERENCES dead_letters (id) ON DELETE CASCADE,
    redriven_at        timestamptz NOT NULL DEFAULT now(),
    -- what the redriven payload became (a decision), and its new dead letter if it failed again
    decision           text,
    new_dead_letter_id bigint
);

INSERT INTO dead_letter_redrives (dead_letter_id, redriven_at)
SELECT id, redriven_at FROM dead_letters WHERE redriven_at IS NOT NULL;
