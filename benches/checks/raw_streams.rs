//! The raw Redis Streams baseline both Redis speed checks compare with: one
//! `XREADGROUP` of up to `count` entries of stream `raw` for group `g`,
//! consumer `c`, then one `XACK` of what it read.

/// Reads up to `count` entries and acks them; returns how many it read
/// (0 when the stream is drained). Errors: the server's reply.
pub async fn read_and_ack<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    count: usize,
) -> redis::RedisResult<usize> {
    let reply: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("c")
        .arg("COUNT")
        .arg(count)
        .arg("STREAMS")
        .arg("raw")
        .arg(">")
        .query_async(conn)
        .await?;
    let ids: Vec<String> = reply
        .keys
        .iter()
        .flat_map(|k| k.ids.iter().map(|e| e.id.clone()))
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let _: u64 = redis::cmd("XACK")
        .arg("raw")
        .arg("g")
        .arg(&ids)
        .query_async(conn)
        .await?;
    Ok(ids.len())
}
