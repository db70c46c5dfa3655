//! The bench's warm Redis: every per-slot warmth marker of the gateway
//! (`<prefix>:warm:{<tag>}`, one per hash slot, as `src/store/redis/slots.rs` names them)
//! set two days in the past as this server process's own (the number, then turned
//! "raw" by an APPEND of nothing that is neither replicated nor persisted: the proof of
//! origin `lua/claim.lua` checks), so that `lookup_on_miss = "when_cold"` rows run
//! against a Redis that provably vouches.
//! The fleet crate does not link the gateway, so the slot function (CRC16/XMODEM of
//! the tag, modulo 16,384) and the tag choice are repeated here; the unit test pins
//! them to known `CLUSTER KEYSLOT` values, and the bench's outcomes table shows zero
//! `lookup` statements on that row when they agree.

use std::process::Command;

const SLOTS: usize = 16_384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster uses it.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// For every slot, the shortest hex tag (counting up from 0) that lands in it.
fn tags() -> Vec<String> {
    let mut tags = vec![String::new(); SLOTS];
    let mut left = SLOTS;
    let mut n: u64 = 0;
    while left > 0 {
        let tag = format!("{n:x}");
        let slot = usize::from(crc16(tag.as_bytes())) % SLOTS;
        if tags[slot].is_empty() {
            tags[slot] = tag;
            left -= 1;
        }
        n += 1;
    }
    tags
}

/// Sets every slot's marker of the default key prefix on the Redis at `port` two days in
/// the past (older than any `ttl` the bench, the soak or `cpu_ab --warm` runs).
pub fn backdate_two_days(port: u16) -> Result<(), String> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let since_ms = now.map_err(|e| e.to_string())?.as_millis() - 2 * 86_400_000;
    backdate_markers(port, "idemgate", since_ms)
}

/// Sets every slot's marker on the Redis at `port` to `since_ms`, written by this
/// server process, in one script.
pub fn backdate_markers(port: u16, prefix: &str, since_ms: u128) -> Result<(), String> {
    let script = "for _, k in ipairs(KEYS) do redis.call('SET', k, ARGV[1]) end \
                  redis.set_repl(redis.REPL_NONE) \
                  for _, k in ipairs(KEYS) do redis.call('APPEND', k, '') end \
                  return #KEYS";
    let keys: Vec<String> = tags()
        .iter()
        .map(|t| format!("{prefix}:warm:{{{t}}}"))
        .collect();
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "EVAL", script, &SLOTS.to_string()])
        .args(&keys)
        .arg(since_ms.to_string())
        .output()
        .map_err(|e| format!("redis-cli: {e}"))?;
    let reply = String::from_utf8_lossy(&out.stdout);
    if reply.trim() != SLOTS.to_string() {
        return Err(format!("could not set the warmth markers: {reply}"));
    }
    Ok(())
}

/// Keys the bench's Redis holds before the first row ([`fill`]).
pub const FILLER_KEYS: u64 = 4_300_000;

/// Fills the Redis at `port` with `keys` small keys (`bench:filler:<n>`, 32-byte
/// values), each with a ten-day TTL, in scripts of 500,000 keys: the state of a busy
/// production Redis (millions of records, all expiring), and one whose hash tables
/// (the keyspace and the expiry table, both doubled at each power of two) are past
/// 2^22 entries, so the up to ~4 M keys the rows add never make them grow mid-row (a
/// run during which the keyspace crossed 2^20 keys measured its scripts 2x slower).
pub fn fill(port: u16, keys: u64) -> Result<(), String> {
    let script = "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do \
                  redis.call('SET', 'bench:filler:' .. i, ARGV[3], 'PX', 864000000) end \
                  return 1";
    let value = "x".repeat(32);
    let mut from = 1;
    while from <= keys {
        let to = (from + 499_999).min(keys);
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "EVAL", script, "0"])
            .args([from.to_string(), to.to_string(), value.clone()])
            .output()
            .map_err(|e| format!("redis-cli: {e}"))?;
        let reply = String::from_utf8_lossy(&out.stdout);
        if reply.trim() != "1" {
            return Err(format!("could not fill redis: {reply}"));
        }
        from = to + 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_redis_cluster_keyslot() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b"foo") as usize % SLOTS, 12182);
        assert_eq!(crc16(b"bar") as usize % SLOTS, 5061);
    }

    #[test]
    fn every_slot_has_a_tag() {
        let tags = tags();
        assert!(tags.iter().all(|t| !t.is_empty()));
        assert_eq!(usize::from(crc16(tags[0].as_bytes())) % SLOTS, 0);
    }
}
