-- The finished_at trigger without a catalog query per step (benchmarks/RESULTS.md, "Round 14: gateway and
-- PostgreSQL CPU per event").
--
-- Migration 0027's BEFORE UPDATE trigger runs whenever a step changes its order's status (every step of the
-- shipped order process does) and looked the order's process up in `processes` each time, for its terminal
-- states: about 40 % of the cost of such an update, measured on a loaded machine. A group commit's statement
-- updates many orders, nearly all of one process: the terminal states are now read once per transaction and
-- process version and kept in a transaction-local setting (`set_config(..., true)`, gone at commit or
-- rollback), named by the process's name in hex (a setting's name allows neither `.` nor `-` and ignores
-- case: `Order` and `order` must not share one) and its version. A transaction sees the terminal states as
-- its first look at them found them; a process version's are written when it is registered.
-- What finishes an order is unchanged: tombstoned, aborted, or a status among its process's terminal states
-- (`completed` when the process or its terminal states are unknown).

CREATE OR REPLACE FUNCTION nexus_order_set_finished_at() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    finished boolean := NEW.tombstone OR NEW.status = 'aborted';
    setting text;
    terminal text;
BEGIN
    IF NOT finished THEN
        setting := 'nexus_terminal.p' || encode(convert_to(NEW.process, 'UTF8'), 'hex') || '_' || NEW.process_version;
        terminal := current_setting(setting, true);
        IF terminal IS NULL OR terminal = '' THEN
            SELECT p.terminal::text INTO terminal
            FROM processes p WHERE p.name = NEW.process AND p.version = NEW.process_version;
            terminal := coalesce(terminal, '{completed}');
            PERFORM set_config(setting, terminal, true);
        END IF;
        finished := coalesce(NEW.status = ANY(terminal::text[]), NEW.status = 'completed');
    END IF;
    NEW.finished_at := CASE WHEN finished THEN coalesce(OLD.finished_at, now()) END;
    RETURN NEW;
END $$;
