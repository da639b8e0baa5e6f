//! The oracle policy of the access-patterns benchmark: it is handed the
//! upcoming offsets (a `ReadPlan`) and asks for exactly those pages, in
//! order. It is the executor's ceiling: perfect prediction, so whatever is
//! left is execution.

use predictio::event::{Event, EventKind, EventKinds};
use predictio::policy::{Policy, PolicyContext};
use predictio::{PageRange, Urgency};

/// Requests every segment of every read plan, in order.
#[derive(Debug, Default)]
pub struct OraclePolicy;

impl Policy for OraclePolicy {
    fn name(&self) -> &str {
        "oracle"
    }

    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::ReadPlan])
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        if let Event::ReadPlan { file, segments } = event {
            let ranges: Vec<PageRange> = segments.iter().map(|s| s.pages()).collect();
            ctx.request(*file, ranges, Urgency::Imminent);
        }
    }
}
