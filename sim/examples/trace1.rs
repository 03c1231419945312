//! Prints the trace of one seed (a development aid): trace1 SEED NODES FAULTS
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let seed: u64 = a.get(1).and_then(|a| a.parse().ok()).unwrap_or(0);
    let nodes: usize = a.get(2).and_then(|a| a.parse().ok()).unwrap_or(1);
    let faults = palm_sim::Faults::parse(a.get(3).map(String::as_str).unwrap_or("heavy")).unwrap();
    let report = palm_sim::run(palm_sim::Options {
        seed,
        nodes,
        faults,
        trace: true,
        ..Default::default()
    });
    println!("{:?}", report.findings.violation.map(|v| v.0));
}
