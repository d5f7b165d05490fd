//! `random-schedule`: persisted random values, scheduling a new top-level execution with a
//! generated `-schedule` extension function, and a direct call of a child workflow.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/random-schedule",
    generate_all,
});

use exports::weir_examples::workflows::random_schedule::{Guest, RandomReport};
use weir::workflow::host::{log, random_string, random_u64};
use weir::workflow::types::{Duration, LogLevel, ScheduleAt};
use weir_examples::workflows::sleepy::{sleep_for, Instant};
use weir_examples::workflows_ext::sleepy::sleep_for_schedule;

struct RandomSchedule;

impl Guest for RandomSchedule {
    fn run(max: u64, schedule_in_ms: u64, sleep_ms: u64) -> Result<RandomReport, String> {
        if max == 0 {
            return Err("max must be at least 1".to_string());
        }
        let number = random_u64(0, max);
        let token = random_string(8, 17);
        let scheduled = sleep_for_schedule(
            ScheduleAt::In(Duration::Milliseconds(schedule_in_ms)),
            sleep_ms,
        );
        log(
            LogLevel::Info,
            &format!("drew {number} and {token}; scheduled {} in {schedule_in_ms} ms", scheduled.id),
        );
        Ok(RandomReport {
            number,
            token,
            scheduled_id: scheduled.id,
        })
    }

    fn call_sleepy(millis: u64) -> Result<Instant, String> {
        sleep_for(millis).map_err(|e| format!("child sleepy.sleep-for failed: {e}"))
    }
}

export!(RandomSchedule);
