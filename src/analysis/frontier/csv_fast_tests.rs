use super::super::{read_general, read_rfc4180};
use super::*;

/// Everything a table holds, numbers as bits, so two readers compare exactly.
type Snapshot = (Vec<String>, Vec<u32>, Vec<(u64, u32, u32, usize, u64, Option<(u64, u64)>)>, Vec<u8>);

fn snapshot(t: &StageTable) -> Snapshot {
    let rows = t
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let device = t.devices.get(i).copied().flatten().map(|d| (d.device_s.to_bits(), d.spill_s.to_bits()));
            (r.step, r.rank, r.stage, r.line, r.seconds.to_bits(), device)
        })
        .collect();
    // The rest, compared through its debug form: bits of every f64 show there too.
    let rest = format!("{:?} {} {:?}", t.overlaps, t.devices.len(), t.attribution).into_bytes();
    (t.schema.stages().to_vec(), t.world.clone(), rows, rest)
}

/// Both readers on `text`: the same table or the same error, whatever the blocks the fast
/// path reads (lines cut at every place) and whether it reads them on one core or two
/// (split at every place). Returns whether the fast path took the whole file.
fn same(text: &[u8], stages: Option<&[String]>) -> bool {
    // (block, split_min)
    let reads: Vec<(usize, usize)> = if text.len() < 4096 {
        [1, 2, 3, 7, 64, BLOCK].into_iter().flat_map(|block| [(block, usize::MAX), (block, 1)]).collect()
    } else {
        vec![(4093, usize::MAX), (BLOCK, usize::MAX), (BLOCK, 1 << 16)]
    };
    let general = read_rfc4180(text, stages).map(|t| snapshot(&t));
    let took: Vec<bool> = reads
        .iter()
        .map(|&(block, split_min)| {
            let (fast, took) = match read_blocks(text, stages, block, split_min) {
                Outcome::Done(result) => (result, true),
                Outcome::Declined(rest, resume) => (read_general(rest, stages, resume), false),
            };
            let fast = fast.map(|t| snapshot(&t));
            match (&general, &fast) {
                (Ok(a), Ok(b)) => assert!(a == b, "tables differ for {:?}", String::from_utf8_lossy(text)),
                (Err(a), Err(b)) => assert_eq!(a, b, "{:?}", String::from_utf8_lossy(text)),
                _ => panic!(
                    "{:?}: general {:?}, fast {:?}",
                    String::from_utf8_lossy(text),
                    general.as_ref().err(),
                    fast.as_ref().err()
                ),
            }
            took
        })
        .collect();
    assert!(took.iter().all(|&t| t == took[0]), "{:?}: taken {took:?}", String::from_utf8_lossy(text));
    took[0]
}

const HEADER: &str = "step,rank,stage,seconds,overlap_seconds,wait_seconds,caused_seconds\n";

#[test]
fn real_steps_csv_takes_the_fast_path_with_the_general_readers_table() {
    // `sf steps --csv` on an 8-rank job written by the real writer (examples/synth_logs).
    let sample = include_bytes!("csv_fast_sample.csv");
    assert!(same(sample, None));
    let stages: Vec<String> = read_rfc4180(&sample[..], None).unwrap().schema.stages().to_vec();
    assert!(same(sample, Some(&stages)));
    assert!(same(&sample.replace_newlines_with_crlf(), None));
}

trait Crlf {
    fn replace_newlines_with_crlf(&self) -> Vec<u8>;
}

impl Crlf for [u8] {
    fn replace_newlines_with_crlf(&self) -> Vec<u8> {
        self.iter().flat_map(|&b| if b == b'\n' { vec![b'\r', b'\n'] } else { vec![b] }).collect()
    }
}

#[test]
fn edge_cases_give_the_same_table_or_error_on_the_same_line() {
    let taken = [
        "",
        "\n\n",
        "step,rank,stage,seconds\n",
        "step,rank,stage,seconds",
        "\u{feff}step,rank,stage,seconds\r\n0,0,data,1\r\n\r\n1,0,data,2",
        "\n  \nseconds , stage,rank,step,extra\n1,data,0,0,x\n \t\n2,data,1,0\n",
        "step,rank,stage,seconds\n0,0,data,0.5\n0,0,data,0.5\n",
        "step,rank,stage,seconds\n0,0,data,1\n0,x,data,1\n",
        "step,rank,stage,seconds\n0,0,data,1\n0,99999999999,data,1\n",
        "step,rank,stage,seconds\n0,0,data,1\n0,0,,1\n",
        "step,rank,stage,seconds\n0,0,data,1\n0,0,fwd\n",
        "step,rank,stage,seconds\n0,0,data,-0.5\n",
        "step,rank,stage,seconds\n0,0,data,-0\n0,1,data,NaN\n",
        "step,rank,stage,seconds\n0,0,data,1e400\n",
        "step,rank,stage,seconds\n0,0,\"data,io\",0.5\r\n0,1,\"say \"\"hi\"\"\",0.25\n0,2,\"data,io\",1\r\n",
        "step,rank,seconds,stage\r\n0,0,1,\"a,b\"\r\n0,1,2,\"a,b\"\r\n",
        "step,rank,stage,seconds\n0,0,\"\",0.5\n",
        "step,rank,stage,seconds,\"overlap_seconds\"\n0,0,a,1,0.5\n0,0,b,1,0.25\n0,1,a,1,\n",
        "step,rank,stage,seconds,overlap_seconds\n0,0,a,1,-1\n",
        "step,rank,stage,seconds,device_seconds,spill_seconds\n0,0,fwd,0.1,0.08,0.02\n0,1,fwd,0.1,,\n",
        "step,rank,stage,seconds,device_seconds,spill_seconds\n0,0,fwd,0.1,0.01,0.02\n",
        "step,rank,stage,seconds,device_seconds\n0,0,fwd,0.1,x\n",
        "step,rank,stage,seconds,wait_seconds,caused_seconds\n0,0,a,1,0.25,\n0,0,b,2,,0.5\n0,1,a,1,0,\n",
        "step,rank,stage,seconds,wait_seconds,caused_seconds\n0,0,a,1,,\n\n0,1,a,1,,inf\n",
        "step,rank,stage,seconds,wait_seconds\n0,0,a,1\n",
        // Blanks around values and names, other number forms: the one-pass read leaves
        // these lines to the split-and-check path, with the same results.
        "step,rank,stage,seconds,wait_seconds\n0,0,a,1,\n0,1,a, 1 ,\n0,2,a,1\t,0.5\n0,3, a,1,\n0,4,a ,1,\n",
        "step,rank,stage,seconds,x\n0,0,a,12345678.123456789,y\n0,0,b,1e-3,z\n0,1,a,+1,\n0,1,b,-0,\n",
        "step,rank,stage,seconds,overlap_seconds\r\n0,0,a,0.1,\r\n0,0,b,0.2,0.5\r\n0,1,a,00000000001.5000000000,\r\n",
        "step,rank,stage,seconds,caused_seconds\n0,0,a,0.30000000000000004,0.1000000000000000055511151231257827\n",
        // Rows out of order, and a duplicate found after sorting them.
        "step,rank,stage,seconds\n1,0,a,1\n0,1,a,2\n0,0,b,3\n0,0,a,4\n1,1,a,5\n",
        "step,rank,stage,seconds\n1,0,a,1\n0,1,a,2\n0,0,b,3\n0,0,a,4\n1,0,a,5\n",
        "step,rank,stage,seconds,wait_seconds,caused_seconds,device_seconds,spill_seconds\n\
         1,1,a,1,0.5,,0.2,0.1\n0,1,a,1,,0.25,,\n1,0,a,2,0.1,0.1,0.3,\n0,0,a,1,,,,\n",
        // Ranks far apart (no bitset), and not in order.
        "step,rank,stage,seconds\n0,5,a,1\n0,4000000000,a,1\n1,7,a,1\n1,3,a,1\n",
        // A name with a comma, then a line whose fields split it.
        "step,rank,stage,seconds\n0,0,\"a,b\",1\n0,1,a,b,1\n",
        "step,rank,stage,seconds,wait_seconds\n0,0,a,1,,extra,\"q\"\n",
        // Missing cells and short lines at every column.
        "step,rank,stage,seconds,overlap_seconds,wait_seconds,caused_seconds\n0,0,a,1,0,,\n0,1,a,1,0,\n",
        "step,rank,stage,seconds,overlap_seconds\n0,0,a,1,0\n0,1,a\n",
        "step,rank,stage,seconds,overlap_seconds\n0,0,a,1,0\n0,1,a,\n",
        "step,rank,stage,seconds,overlap_seconds\n0,0,a,1,0\n0,1,,1,\n",
    ];
    for text in taken {
        assert!(same(text.as_bytes(), None), "declined {text:?}");
    }
    // Quotes the fast path cannot place, and stage names that are not UTF-8, go to the
    // general reader, which gives its own answer.
    let declined: [&[u8]; 8] = [
        // In the header, after blank lines: the general reader reads the file from there.
        b"\n\n\"st\nep\",rank,stage,seconds\n0,0,a,1\n",
        b"\n\"step\",\"ra\"nk,stage,seconds\n0,0,a,1\n",
        b"step,rank,stage,seconds\n0,1,\"data\" ,0.25\n",
        b"step,rank,stage,seconds\n0,0,\"multi\nline\",1\n0,1,x,1\n",
        b"step,rank,stage,seconds\n0,0,da\"ta,1\n",
        b"step,rank,stage,seconds\n0,0,\"data\"x,1\n",
        b"step,rank,stage,seconds\n0,0, \"data\",1\n",
        b"step,rank,stage,seconds\n0,0,d\xffa,1\n0,1,d\xffa,1\n",
    ];
    for text in declined {
        assert!(!same(text, None), "took {:?}", String::from_utf8_lossy(text));
    }
    let fixed = ["data".to_string()];
    assert!(same(b"step,rank,stage,seconds\n0,0,data,1\n0,0,fwd,1\n", Some(&fixed)));
}

#[test]
fn numbers_read_bit_for_bit_as_str_parse_reads_them() {
    let mut forms: Vec<String> = [
        "0",
        "1",
        "0.5",
        "5.",
        ".5",
        "+1",
        "-0",
        "1e5",
        "1E-3",
        "007.250",
        "0.1",
        "0.30000000000000004",
        "9007199254740993",
        "9007199254740992.5",
        "123456789012345678",
        "1234567890123456789",
        "12345678901234567890",
        "0.000000000000000000001",
        "1.7976931348623157e308",
        "inf",
        "nan",
        "1_0",
        "",
        " 1",
        "1 ",
        "1.2.3",
        "0x10",
    ]
    .map(String::from)
    .to_vec();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let v = (rng >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((rng % 9) as i32 - 6);
        forms.push(v.to_string());
        forms.push(format!("{v:.6}"));
    }
    for text in &forms {
        let want: Option<f64> = text.parse().ok();
        assert_eq!(number(text.as_bytes()).map(f64::to_bits), want.map(f64::to_bits), "{text:?}");
    }
    for text in ["0", "18446744073709551615", "18446744073709551616", "4294967296", "+3", "12a"] {
        assert_eq!(integer(text.as_bytes(), 19).or_else(|| parse::<u64>(text.as_bytes())), text.parse().ok());
        let rank = integer(text.as_bytes(), 9).map(|r| r as u32).or_else(|| parse::<u32>(text.as_bytes()));
        assert_eq!(rank, text.parse().ok(), "{text}");
    }
}

#[test]
fn names_found_on_both_cores_are_numbered_by_first_appearance_in_the_file() {
    // Rows of equal length: the split falls after the third, so the first half finds `xx`
    // and the second finds `yy` before `xx` (numbered 1 and 2 there, 2 and 1 in the file).
    let rows = ["1,0,aa", "1,1,aa", "1,0,xx", "1,1,yy", "1,1,xx"].map(|r| format!("{r},0.5,0,0.1,0.2\n"));
    let text = format!("{HEADER}{}", rows.concat());
    assert!(same(text.as_bytes(), None));
    let Outcome::Done(Ok(table)) = read_blocks(text.as_bytes(), None, BLOCK, 1) else { panic!("read whole") };
    assert_eq!(table.schema.stages(), ["aa", "xx", "yy"]);
    let stages: Vec<(u32, u32)> = table.rows.iter().map(|r| (r.rank, r.stage)).collect();
    assert_eq!(stages, [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)], "rank 1's xx is stage 1, its yy stage 2");
}

/// A file as `sf steps --csv` writes it, larger than a block; `late` adds a stage that
/// first appears in its last rows. The second half lists each rank's stages in reverse.
fn generated(ranks: u32, steps: u64, late: bool) -> Vec<u8> {
    use std::io::Write;
    let mut out = HEADER.as_bytes().to_vec();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..steps {
        for rank in 0..ranks {
            let mut stages: Vec<(usize, &str)> =
                ["data", "forward", "backward", "optimizer"].into_iter().enumerate().collect();
            if step >= steps / 2 {
                stages.reverse();
            }
            for (s, stage) in stages {
                rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let seconds = (rng >> 11) as f64 / (1u64 << 53) as f64 * 0.1;
                let wait = if s == 2 { (seconds / 3.0).to_string() } else { String::new() };
                writeln!(out, "{step},{rank},{stage},{seconds},0,{wait},").unwrap();
            }
            if late && step + 1 == steps {
                writeln!(out, "{step},{rank},late,0.001,0,,0.5").unwrap();
            }
        }
    }
    out
}

#[test]
fn large_files_read_block_by_block_match_the_general_reader() {
    let text = generated(200, 200, true);
    assert!(text.len() > 2 * BLOCK);
    assert!(same(&text, None));
    let mut table = read_rfc4180(&text[..], None).unwrap();
    assert_eq!(table.schema.stages().last().map(String::as_str), Some("late"));
    assert_eq!(table.take_attribution().unwrap().caused.len(), 200);
    // An error in a later block names its line in the file.
    let mut bad = text.clone();
    let at = bad[..bad.len() - 100].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let line = bad[..at].iter().filter(|&&b| b == b'\n').count() + 1;
    bad.splice(at..at, b"0,0,data,bad\n".iter().copied());
    assert!(same(&bad, None));
    assert_eq!(read_rfc4180(&bad[..], None).err().and_then(|e| e.line()), Some(line));
    // A quote the fast path declines, in a later block, still reads: the general reader
    // goes on from that line with what was read before it.
    let mut quoted = text;
    let at = quoted[..quoted.len() - 100].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    quoted.splice(at..at, b"9,9,\"a\nb\",1\n".iter().copied());
    assert!(!same(&quoted, None));
}

#[test]
fn waits_come_in_the_attribution_s_order_whatever_their_ranks() {
    // By step, then rank (as sf writes them): counted by rank, or sorted when the ranks
    // are too sparse to count; in any other order, sorted.
    let step_major = |ranks: &[u32]| -> Vec<WaitKeyed> {
        (0..4u64).flat_map(|step| ranks.iter().map(move |&r| ((r, step, 1), f64::from(r) + step as f64))).collect()
    };
    for ranks in [&[0, 1, 2, 5][..], &[3, 4_000_000_000], &[7]] {
        let waits = step_major(ranks);
        let mut sorted = waits.clone();
        sorted.sort_by_key(|(key, _)| *key);
        assert_eq!(rank_major(waits.clone()), sorted, "ranks {ranks:?}");
        let mut shuffled = waits;
        shuffled.reverse();
        assert_eq!(rank_major(shuffled), sorted, "ranks {ranks:?}, reversed");
    }
    assert!(rank_major(Vec::new()).is_empty());
}
