//! SPEC 3, Updating on Redis: `update`, one `control.lua` call that
//! changes a waiting item's tier, not-before time or payload and moves it
//! where the change puts it.

use super::RedisQueue;
use super::reply::{array, at, int, text};
use super::scripts::{IS_DEAD, IS_FINISHED, IS_PARKED, IS_PENDING};
use crate::config::ms;
use crate::error::{Error, Result};
use crate::item::{ItemUpdate, check_update, not_updatable, parked_takes_no_timer};
use crate::outcome::OutcomeKind;

impl RedisQueue {
    /// SPEC 3, Updating: the checks that need no read, then `control.lua`'s
    /// `update`. A new tier's boost (tier x aging_step, ms) is this
    /// handle's, as an add's is (SPEC 3, Priority).
    pub(super) async fn update_item(&self, id: u64, update: ItemUpdate) -> Result<bool> {
        let c = &self.inner.config;
        check_update(&update, c.max_payload_bytes)?;
        let step = ms(c.aging_step);
        let (tier, boost) = match update.priority {
            Some(t) => (
                t.to_string().into_bytes(),
                (u64::from(t) * step).to_string().into_bytes(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        let nb = match update.not_before_ms {
            Some(t) => t.min(super::MAX_LUA_MS).to_string().into_bytes(),
            None => Vec::new(),
        };
        let (flag, payload) = match update.payload {
            Some(p) => (b"1".to_vec(), p),
            None => (b"0".to_vec(), Vec::new()),
        };
        let args = vec![
            b"update".to_vec(),
            id.to_string().into_bytes(),
            tier,
            boost,
            nb,
            flag,
            payload,
        ];
        let v = self
            .run("update", &self.inner.scripts.control, args, true)
            .await?;
        let a = array(&v, "update")?;
        match int(at(a, 0, "update")?, "update code")? {
            1 => Ok(true),
            0 => Ok(false),
            IS_PENDING => Err(not_updatable(id, "pending: a consumer holds it")),
            IS_DEAD => Err(not_updatable(id, "a dead letter")),
            IS_PARKED => Err(parked_takes_no_timer(id)),
            IS_FINISHED => {
                let kind = match text(at(a, 1, "update")?, "update outcome kind")?.as_str() {
                    "done" => OutcomeKind::Done { result: Vec::new() },
                    "dead" => OutcomeKind::DeadLettered {
                        reason: String::new(),
                    },
                    "cancelled" => OutcomeKind::Cancelled,
                    other => {
                        return Err(Error::backend(format!(
                            "redis update script answered an outcome of kind {other:?}"
                        )));
                    }
                };
                Err(crate::item::finished_not_updatable(id, &kind))
            }
            other => Err(Error::backend(format!(
                "redis update script answered {other}"
            ))),
        }
    }
}
