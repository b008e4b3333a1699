//! The dashboard of `workjournal serve --http` (SPEC 12.2) in a real
//! headless Chromium driven through chromedriver: the page's counts match
//! `stats`, a redrive moves a dead letter back, pause and resume change a
//! flow, an item a flow limit holds shows with a held tag, a rate-limited
//! flow shows as limited and is backed off and lifted from the page, a request without the token is refused, and read-only mode hides
//! the controls and refuses writes. Screenshots go to target/dashboard/.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use support::{Served, tcp, wait_for};
use workjournal::{ClaimFrom, Config, FlowLimit, ItemState, NewItem, RateLimit, WorkQueue};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver on a free loopback port, stopped on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_driver() -> Driver {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(tool).exists(),
            "{tool} not found: apt-get install chromium chromium-driver"
        );
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {CHROMEDRIVER} ({e}): apt-get install chromium chromium-driver")
        });
    let addr = format!("127.0.0.1:{port}");
    wait_for("chromedriver to listen", || {
        std::net::TcpStream::connect(&addr).is_ok()
    });
    Driver {
        child,
        url: format!("http://{addr}"),
    }
}

async fn browser(driver: &Driver) -> Client {
    // Two crypto providers are linked in (ring and aws-lc-rs): pick one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let caps = serde_json::json!({
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,1100"]
        }
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    ClientBuilder::rustls()
        .expect("rustls")
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("chromedriver starts a chromium session")
}

fn shots() -> PathBuf {
    // The workspace's target/, beside cli/.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("dashboard");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(shots().join(name), png).unwrap();
}

/// The text of `css`, once it exists.
async fn text_of(c: &Client, css: &str) -> String {
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Wait until the text of `css` is `want` (the page refreshes itself).
async fn until_text(c: &Client, css: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = match c.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{css} shows {got:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Click `css`, finding it again when the page's refresh (every 1.5 s)
/// replaced it between the find and the click (a stale element).
async fn click(c: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let e = c
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"));
        match e.click().await {
            Ok(()) => return,
            Err(err) => assert!(Instant::now() < deadline, "cannot click {css}: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Click the row button `css` until the page asks (a confirm or a
/// prompt): a click that lands on a row the refresh is replacing asks
/// nothing, and the test would wait for an alert that never comes.
async fn click_until_alert(c: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        click(c, css).await;
        for _ in 0..20 {
            if c.get_alert_text().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(Instant::now() < deadline, "{css} never asked");
    }
}

/// A queue with something in every state the page shows; returns the id
/// of the dead letter.
async fn fill(served: &Served) -> u64 {
    let q = workjournal::connect(
        &format!("unix:{}", served.socket().display()),
        Config::default(),
    )
    .await
    .unwrap();
    // Finished and kept (SPEC 3, History): one acked with a result, one
    // cancelled while it waited.
    q.add(NewItem::new(b"print poster".to_vec())).await.unwrap();
    let printed = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.ack_with_result(printed[0].receipt, b"printed 3 pages".to_vec())
        .await
        .unwrap();
    let old = q
        .add(NewItem::new(b"old export".to_vec()))
        .await
        .unwrap()
        .id;
    q.cancel(old).await.unwrap();
    q.pause("held").await.unwrap();
    q.add(NewItem::new(b"resize photo 1".to_vec()).flow("held"))
        .await
        .unwrap();
    q.add(NewItem::new(b"resize photo 2".to_vec()).flow("held"))
        .await
        .unwrap();
    let doomed = q
        .add(NewItem::new(b"send invoice 42".to_vec()))
        .await
        .unwrap()
        .id;
    let taken = q.claim(10, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(taken.len(), 1, "the held items are parked");
    q.dead_letter(taken[0].receipt, "smtp 550: mailbox unavailable")
        .await
        .unwrap();
    q.add(NewItem::new(b"long job".to_vec())).await.unwrap();
    let working = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(working.len(), 1);
    q.add(NewItem::new(b"report 2026-11".to_vec()))
        .await
        .unwrap();
    q.add(NewItem::new(vec![0u8, 159, 146, 150, 1, 2]))
        .await
        .unwrap();
    q.add_delayed(
        NewItem::new(b"reminder".to_vec()),
        q.now_ms().await.unwrap() + 3_600_000,
    )
    .await
    .unwrap();
    q.close().await.unwrap();
    doomed
}

async fn login(c: &Client, http: &str, token: &str) {
    c.goto(&format!("http://{http}/?token={token}"))
        .await
        .unwrap();
    text_of(c, "#count-backlog b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_queue_and_acts_on_it() {
    let driver = start_driver();
    let served = Served::start(&["--http", "127.0.0.1:0"]);
    let http = served.http.clone().expect("the banner names the dashboard");
    let token = served.token();
    let dead = fill(&served).await;

    // Without the token: refused, in the browser too.
    let refused = tcp(&http, "GET", "/", &[], "");
    assert_eq!(refused.status, 401, "{}", refused.body);
    let refused = tcp(&http, "GET", "/ui/overview", &[], "");
    assert_eq!(refused.status, 401);
    let c = browser(&driver).await;
    c.goto(&format!("http://{http}/")).await.unwrap();
    let source = c.source().await.unwrap();
    assert!(source.contains("unauthorized"), "{source}");
    assert!(!source.contains("count-backlog"));

    // With it: the counts are those of `stats`.
    login(&c, &http, &token).await;
    let stats = served.stats();
    for (id, key) in [
        ("backlog", "backlog"),
        ("due", "due"),
        ("pending", "pending"),
        ("delayed", "delayed"),
        ("parked", "parked"),
        ("dead_letters", "dead_letters"),
    ] {
        until_text(&c, &format!("#count-{id} b"), &stats[key].to_string()).await;
    }
    assert_eq!(stats["backlog"], 2, "{stats}");
    assert_eq!(stats["parked"], 2, "{stats}");
    // The pending tab lists the claimed item, with its age.
    let row = text_of(&c, "#items tbody tr[data-state=pending]").await;
    assert!(row.contains("long job"), "{row}");
    until_text(&c, "#flows tr[data-flow=held] td.flow-state", "paused").await;
    shot(&c, "overview.png").await;

    // The finished items kept: the acked one with its result, the
    // cancelled one; neither has buttons.
    assert_eq!(stats["completed"], 1, "{stats}");
    assert_eq!(stats["cancelled"], 1, "{stats}");
    click(&c, "#tabs button[data-state=completed]").await;
    let row = text_of(&c, "#items tbody tr[data-state=completed]").await;
    assert!(row.contains("print poster"), "{row}");
    assert!(row.contains("printed 3 pages"), "{row}");
    assert!(
        c.find(Locator::Css("#items tbody tr[data-state=completed] button"))
            .await
            .is_err()
    );
    click(&c, "#tabs button[data-state=cancelled]").await;
    let row = text_of(&c, "#items tbody tr[data-state=cancelled]").await;
    assert!(row.contains("old export"), "{row}");

    // Dead letters: reason and a payload; redrive moves it back.
    click(&c, "#tabs button[data-state=dead_letter]").await;
    let row = text_of(&c, &format!("#items tr[data-id=\"{dead}\"]")).await;
    assert!(row.contains("smtp 550"), "{row}");
    assert!(row.contains("send invoice 42"), "{row}");
    shot(&c, "dead_letters.png").await;
    // The whole page at once (docs/dashboard.png is one of these).
    c.set_window_size(1100, 1450).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    shot(&c, "full.png").await;
    click(
        &c,
        &format!("#items tr[data-id=\"{dead}\"] button[data-action=redrive]"),
    )
    .await;
    wait_for("the redrive", || served.stats()["dead_letters"] == 0);
    assert_eq!(served.stats()["backlog"], 3);
    until_text(&c, "#count-dead_letters b", "0").await;
    let q = workjournal::connect(
        &format!("unix:{}", served.socket().display()),
        Config::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        q.find(dead).await.unwrap().unwrap().state,
        ItemState::Backlog
    );

    // A payload that is not text shows as hex; search finds by text and id.
    click(&c, "#tabs button[data-state=backlog]").await;
    until("the backlog tab", || async {
        let t = c
            .find(Locator::Css("#items tbody"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        t.contains("00 9f 92 96 01 02") && t.contains("send invoice 42")
    })
    .await;
    c.find(Locator::Css("#search-text"))
        .await
        .unwrap()
        .send_keys("report")
        .await
        .unwrap();
    click(&c, "#search button[type=submit]").await;
    until("the search", || async {
        let t = c
            .find(Locator::Css("#items tbody"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        t.contains("report 2026-11") && !t.contains("send invoice")
    })
    .await;

    // Resume, then pause again through the form.
    click(&c, "#flows button[data-action=resume][data-flow=held]").await;
    until("the resume", || async {
        q.paused_flows().await.unwrap().is_empty()
    })
    .await;
    until_text(&c, "#flows tr[data-flow=held] td.flow-state", "running").await;
    assert_eq!(served.stats()["parked"], 0);
    c.find(Locator::Css("#pause-flow"))
        .await
        .unwrap()
        .send_keys("held")
        .await
        .unwrap();
    click(&c, "#pause-form button[type=submit]").await;
    until("the pause", || async {
        q.paused_flows().await.unwrap() == vec!["held".to_string()]
    })
    .await;
    until_text(&c, "#flows tr[data-flow=held] td.flow-state", "paused").await;

    // An item a flow limit holds (SPEC 12.1): listed in the backlog with a
    // held tag, on the JSON route and on the page.
    q.set_flow_limit("capped", FlowLimit::Concurrency(Some(1)))
        .await
        .unwrap();
    q.add(NewItem::new(b"capped 1".to_vec()).flow("capped"))
        .await
        .unwrap();
    let waiting = q
        .add(NewItem::new(b"capped 2".to_vec()).flow("capped"))
        .await
        .unwrap()
        .id;
    let taken = q.claim(50, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert!(
        taken.iter().all(|t| t.item.id != waiting),
        "the cap holds it"
    );
    let found = q.find(waiting).await.unwrap().unwrap();
    assert_eq!((found.state, found.held), (ItemState::Backlog, true));
    let bearer = format!("Bearer {token}");
    let listed = tcp(
        &http,
        "GET",
        "/ui/items?state=backlog&q=capped",
        &[("Authorization", bearer.as_str())],
        "",
    );
    assert_eq!(listed.status, 200, "{}", listed.body);
    let page: serde_json::Value = serde_json::from_str(&listed.body).unwrap();
    assert_eq!(page["items"][0]["id"], waiting, "{page}");
    assert_eq!(page["items"][0]["held"], true, "{page}");
    let search = c.find(Locator::Css("#search-text")).await.unwrap();
    search.clear().await.unwrap();
    search.send_keys("capped").await.unwrap();
    click(&c, "#search button[type=submit]").await;
    let tag = format!("#items tr[data-id=\"{waiting}\"] span.badge.held");
    until("the held tag", || async {
        c.find(Locator::Css(&tag)).await.is_ok()
    })
    .await;
    assert_eq!(text_of(&c, &tag).await, "held");

    // A rate-limited flow (SPEC 12.2): shown as limited with its rate;
    // "back off 30s" backs it off, "lift" lifts it, and `flow_limits`
    // agrees each time.
    q.set_flow_limit(
        "slow",
        FlowLimit::Rate(Some(RateLimit::new(5, Duration::from_secs(60)))),
    )
    .await
    .unwrap();
    q.add(NewItem::new(b"slow 1".to_vec()).flow("slow"))
        .await
        .unwrap();
    until_text(&c, "#flows tr[data-flow=slow] td.flow-state", "limited").await;
    let limits = text_of(&c, "#flows tr[data-flow=slow] td.flow-limits").await;
    assert!(limits.contains("rate 5 per 60 s"), "{limits}");
    until_text(&c, "#flows tr[data-flow=capped] td.flow-state", "limited").await;
    let capped = text_of(&c, "#flows tr[data-flow=capped] td.flow-limits").await;
    assert!(capped.contains("cap 1"), "{capped}");
    assert!(capped.contains("holding now"), "{capped}");
    click(&c, "#flows button[data-action=back_off][data-flow=slow]").await;
    until("the back-off", || async {
        q.flow_limits()
            .await
            .unwrap()
            .iter()
            .any(|l| l.flow == "slow" && l.backoff_until_ms.is_some() && l.blocked)
    })
    .await;
    until_text(&c, "#flows tr[data-flow=slow] td.flow-state", "backed_off").await;
    shot(&c, "backed_off.png").await;
    click(&c, "#flows button[data-action=lift][data-flow=slow]").await;
    until("the lift", || async {
        q.flow_limits()
            .await
            .unwrap()
            .iter()
            .any(|l| l.flow == "slow" && l.backoff_until_ms.is_none() && l.rate.is_some())
    })
    .await;
    until_text(&c, "#flows tr[data-flow=slow] td.flow-state", "limited").await;
    c.find(Locator::Css(
        "#flows button[data-action=back_off][data-flow=slow]",
    ))
    .await
    .unwrap();

    // An error shows in one line.
    c.execute(
        "document.querySelector('#pause-flow').value = 'bad\\tname';",
        vec![],
    )
    .await
    .unwrap();
    click(&c, "#pause-form button[type=submit]").await;
    until("an error line", || async {
        let e = c.find(Locator::Css("#error")).await.unwrap();
        e.is_displayed().await.unwrap_or(false) && !e.text().await.unwrap_or_default().is_empty()
    })
    .await;
    let error = text_of(&c, "#error").await;
    assert!(error.contains("control characters"), "{error}");
    assert!(!error.contains('\n'), "{error}");

    // Row actions (SPEC 3: Cancelling, Updating, Timers, Removing), each
    // asked for confirmation where it ends an item: cancel a running item
    // (it is marked for its holder), promote a delayed one and cancel it
    // in the due lane (it ends at once), give a waiting one a new priority
    // and remove it.
    let id_of = |state: ItemState, text: &'static str| {
        let q = q.clone();
        async move {
            let page = q
                .list(workjournal::ListQuery::new(state).limit(100))
                .await
                .unwrap();
            page.items
                .iter()
                .find(|l| l.item.payload == text.as_bytes())
                .map(|l| l.item.id)
                .unwrap_or_else(|| panic!("no {state:?} item {text:?}"))
        }
    };
    let long = id_of(ItemState::Pending, "long job").await;
    let reminder = id_of(ItemState::Delayed, "reminder").await;
    // (The backlog's first items were claimed by the cap's check above.)
    let report = q.add(NewItem::new(b"remove me".to_vec())).await.unwrap().id;
    c.find(Locator::Css("#search-text"))
        .await
        .unwrap()
        .clear()
        .await
        .unwrap();
    click(&c, "#tabs button[data-state=pending]").await;
    click_until_alert(
        &c,
        &format!("#items tr[data-id=\"{long}\"] button[data-action=cancel]"),
    )
    .await;
    c.accept_alert().await.unwrap();
    until("the cancel mark", || async {
        q.wait_cancelled(vec![long], Duration::ZERO).await.unwrap() == vec![long]
    })
    .await;
    // The row shows the mark (SPEC 12.1).
    click(&c, "#tabs button[data-state=pending]").await;
    let badge = format!("#items tr[data-id=\"{long}\"] span.badge.cancelling");
    until("the cancelling tag", || async {
        c.find(Locator::Css(&badge)).await.is_ok()
    })
    .await;
    click(&c, "#tabs button[data-state=delayed]").await;
    click(
        &c,
        &format!("#items tr[data-id=\"{reminder}\"] button[data-action=promote]"),
    )
    .await;
    until("the promote", || async {
        q.find(reminder).await.unwrap().map(|l| l.state) == Some(ItemState::Due)
    })
    .await;
    click(&c, "#tabs button[data-state=due]").await;
    click_until_alert(
        &c,
        &format!("#items tr[data-id=\"{reminder}\"] button[data-action=cancel]"),
    )
    .await;
    c.accept_alert().await.unwrap();
    until("the cancel", || async {
        q.outcome(reminder)
            .await
            .unwrap()
            .is_some_and(|o| o.is_cancelled())
    })
    .await;
    // A new priority tier from the row (SPEC 3, Updating), asked for in a
    // prompt.
    click(&c, "#tabs button[data-state=backlog]").await;
    click_until_alert(
        &c,
        &format!("#items tr[data-id=\"{report}\"] button[data-action=priority]"),
    )
    .await;
    c.send_alert_text("7").await.unwrap();
    c.accept_alert().await.unwrap();
    until("the new priority", || async {
        q.find(report)
            .await
            .unwrap()
            .is_some_and(|l| l.item.priority == 7)
    })
    .await;
    click(&c, "#tabs button[data-state=backlog]").await;
    click_until_alert(
        &c,
        &format!("#items tr[data-id=\"{report}\"] button[data-action=remove]"),
    )
    .await;
    c.accept_alert().await.unwrap();
    until("the remove", || async {
        q.find(report).await.unwrap().is_none()
    })
    .await;

    // A phone screen: nothing sticks out sideways.
    c.set_window_size(390, 844).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wide = c
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        wide,
        serde_json::Value::Bool(true),
        "the page is wider than a phone"
    );
    shot(&c, "phone.png").await;
    q.close().await.unwrap();
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_hides_the_controls_and_refuses_writes() {
    let driver = start_driver();
    let served = Served::start(&["--http", "127.0.0.1:0", "--read-only"]);
    let http = served.http.clone().unwrap();
    let token = served.token();
    let dead = fill(&served).await;
    let q = workjournal::connect(
        &format!("unix:{}", served.socket().display()),
        Config::default(),
    )
    .await
    .unwrap();
    q.set_flow_limit(
        "slow",
        FlowLimit::Rate(Some(RateLimit::new(5, Duration::from_secs(60)))),
    )
    .await
    .unwrap();
    q.back_off("slow", Duration::from_secs(600)).await.unwrap();
    let c = browser(&driver).await;
    login(&c, &http, &token).await;
    until_text(&c, "#count-dead_letters b", "1").await;
    until_text(&c, "#flows tr[data-flow=held] td.flow-state", "paused").await;
    // A backed-off flow is shown, without its lift control.
    until_text(&c, "#flows tr[data-flow=slow] td.flow-state", "backed_off").await;
    click(&c, "#tabs button[data-state=dead_letter]").await;
    text_of(&c, &format!("#items tr[data-id=\"{dead}\"]")).await;
    assert_eq!(text_of(&c, "#mode").await, "read-only");
    for control in [
        "button[data-action]",
        "#pause-form",
        "#redrive-all",
        "#purge",
        "input.pick",
    ] {
        assert!(
            c.find_all(Locator::Css(control)).await.unwrap().is_empty(),
            "read-only page shows {control}"
        );
    }
    shot(&c, "read_only.png").await;
    // A write sent anyway is refused, and changes nothing.
    let bearer = format!("Bearer {token}");
    let r = tcp(
        &http,
        "POST",
        "/ui/action",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        &format!("{{\"action\":\"redrive\",\"ids\":[{dead}]}}"),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("read-only"), "{}", r.body);
    assert_eq!(served.stats()["dead_letters"], 1);
    // A cancel too (the running item stays unmarked).
    let running = served.stats()["pending"].as_u64().unwrap();
    let r = tcp(
        &http,
        "POST",
        "/ui/action",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        "{\"action\":\"cancel\",\"ids\":[1,2,3,4,5,6,7]}",
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(served.stats()["pending"].as_u64().unwrap(), running);
    let ids: Vec<u64> = (1..=7).collect();
    assert!(
        q.wait_cancelled(ids, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    let r = tcp(
        &http,
        "POST",
        "/ui/action",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        "{\"action\":\"lift\",\"flow\":\"slow\"}",
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let slow = q.flow_limits().await.unwrap();
    assert!(
        slow.iter()
            .any(|l| l.flow == "slow" && l.backoff_until_ms.is_some()),
        "{slow:?}"
    );
    q.close().await.unwrap();
    // And without the token, reads are refused too.
    let r = tcp(&http, "GET", "/ui/items?state=dead_letter", &[], "");
    assert_eq!(r.status, 401);
    c.close().await.unwrap();
}
