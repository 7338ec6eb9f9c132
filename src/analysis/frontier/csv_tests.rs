use super::*;
use crate::analysis::blame::Attribution;

fn parse(text: &str, stages: Option<&[&str]>) -> Result<StageTable, CsvError> {
    let stages: Option<Vec<String>> = stages.map(|s| s.iter().map(|s| s.to_string()).collect());
    read(text.as_bytes(), stages.as_deref())
}

#[test]
fn errors_name_their_line() {
    let e = |text: &str| parse(text, None).err().unwrap();
    assert_eq!(e(""), CsvError::Empty);
    assert_eq!(e("step,rank,stage,seconds\n"), CsvError::NoRows);
    assert_eq!(e("step,rank,seconds\n0,0,1\n"), CsvError::MissingColumns { columns: vec!["stage"] });
    assert_eq!(e("step,rank,stage,seconds\n0,0,data\n"), CsvError::FieldCount { line: 2, got: 3, want: 4 });
    assert_eq!(e("step,rank,stage,seconds\n0,0,data,-1\n"), CsvError::Negative { line: 2, seconds: -1.0 });
    assert_eq!(e("step,rank,stage,seconds\n\n0,x,data,1\n").line(), Some(3));
    assert_eq!(e("step,rank,stage,seconds\n0,0,data,inf\n").line(), Some(2));
    let dup = e("step,rank,stage,seconds\n0,0,data,1\n0,1,data,1\n0,0,data,2\n");
    assert_eq!(dup, CsvError::Duplicate { line: 4, first_line: 2, step: 0, rank: 0, stage: "data".into() });
    let twice = parse("step,rank,stage,seconds\n0,0,a,1\n", Some(&["a", "a"])).err().unwrap();
    assert_eq!(twice, CsvError::StageList(SchemaError::Duplicate("a".into())));
    let unknown = parse("step,rank,stage,seconds\n0,0,fwd,1\n", Some(&["data"])).err().unwrap();
    assert_eq!(unknown.line(), Some(2));
    assert!(unknown.to_string().contains("add it to --stages"), "{unknown}");
}

#[test]
fn quoted_fields_hold_commas_and_quotes_and_lines_count_blank_and_crlf_ones() {
    let text = "step,rank,stage,seconds\r\n0,0,\"data,io\",0.5\r\n\r\n0,0,\"say \"\"hi\"\"\",0.25\n\n\n";
    let t = parse(text, None).unwrap();
    assert_eq!(t.schema().stages(), ["data,io", "say \"hi\""]);
    let e = parse("step,rank,stage,seconds\r\n\r\n0,0,\"a,b\",1\r\n\n0,x,a,1\r\n", None).err().unwrap();
    assert_eq!(e.line(), Some(5), "{e}");
    // A reader handing out one byte at a time still sees every line.
    let mut one = KeepEmptyLines::new("a\n\nb".as_bytes());
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while std::io::Read::read(&mut one, &mut byte).unwrap() == 1 {
        got.push(byte[0]);
    }
    assert_eq!(got, b"a\n \nb");
}

#[test]
fn an_overlap_column_reads_once_per_step_and_rank() {
    let text = "step,rank,stage,seconds,overlap_seconds\n0,0,a,1,0.5\n0,0,b,1,0.5\n0,1,a,1,\n0,1,b,1,\n";
    let t = parse(text, None).unwrap();
    assert_eq!(t.overlaps, [((0, 0), 0.5)]);
    assert_eq!(parse("step,rank,stage,seconds,overlap_seconds\n0,0,a,1,x\n", None).err().unwrap().line(), Some(2));
}

#[test]
fn wait_columns_carry_the_attribution_and_own_time_takes_the_wait_out() {
    let text = "step,rank,stage,seconds,wait_seconds,caused_seconds\n\
                0,0,a,1,0.25,\n0,0,b,2,,0.5\n0,1,a,1,0,\n0,1,b,2,3,\n";
    let mut t = parse(text, None).unwrap();
    let a = t.take_attribution().unwrap();
    assert!(t.take_attribution().is_none());
    // Blank is no entry; an explicit 0 is one.
    assert_eq!(a.waits.into_iter().collect::<Vec<_>>(), [((0, 0, 0), 0.25), ((1, 0, 0), 0.0), ((1, 0, 1), 3.0)]);
    assert_eq!(a.caused.into_iter().collect::<Vec<_>>(), [((0, 0, 1), 0.5)]);
    let mut t = parse(text, None).unwrap();
    let a = t.take_attribution().unwrap();
    assert_eq!(t.stage_time_s(), [2.0, 4.0]);
    t.take_out_waits(&a);
    let mut own = Vec::new();
    t.for_each_step(|s| {
        own.extend_from_slice(s.durations);
        Ok::<(), ()>(())
    })
    .unwrap();
    // A wait longer than the stage leaves zero own time.
    assert_eq!(own, [0.75, 2.0, 1.0, 0.0]);
    // Either column alone is the attribution; neither is none.
    assert!(parse("step,rank,stage,seconds,caused_seconds\n0,0,a,1,\n", None).unwrap().take_attribution().is_some());
    assert!(parse("step,rank,stage,seconds\n0,0,a,1\n", None).unwrap().take_attribution().is_none());
}

#[test]
fn bad_wait_cells_name_their_line_and_column() {
    for (cell, column) in [("-1,", "wait_seconds"), ("x,", "wait_seconds"), (",inf", "caused_seconds")] {
        let text = format!("step,rank,stage,seconds,wait_seconds,caused_seconds\n0,0,a,1,,\n\n0,1,a,1,{cell}\n");
        let e = parse(&text, None).err().unwrap();
        assert_eq!(e.line(), Some(4), "{cell}");
        assert!(matches!(&e, CsvError::BadWait { column: c, .. } if *c == column), "{e:?}");
        assert!(e.to_string().starts_with(column), "{e}");
    }
    // A row too short for the wait column is a field count error.
    let e = parse("step,rank,stage,seconds,wait_seconds\n0,0,a,1\n", None).err().unwrap();
    assert_eq!(e, CsvError::FieldCount { line: 2, got: 4, want: 5 });
}

#[test]
fn columns_in_any_order_and_stage_order_by_first_appearance() {
    let t = parse("\u{feff}seconds,stage,rank,step\n2,bwd,1,7\n1,data,1,7\n3,data,0,7\n4,bwd,0,7\n", None).unwrap();
    assert_eq!(t.schema().stages(), ["bwd", "data"]);
    let mut seen = Vec::new();
    t.for_each_step(|s| {
        seen.push((s.index, s.ranks.to_vec(), s.durations.to_vec()));
        Ok::<(), ()>(())
    })
    .unwrap();
    assert_eq!(seen, [(7, vec![0, 1], vec![4.0, 3.0, 2.0, 1.0])]);
}

#[test]
fn optional_device_columns_carry_samples_and_blank_means_not_sampled() {
    let text = "step,rank,stage,seconds,device_seconds,spill_seconds\n0,0,fwd,0.1,0.08,0.02\n0,1,fwd,0.1,,\n";
    let t = parse(text, None).unwrap();
    let mut seen = Vec::new();
    t.for_each_step(|s| {
        seen.extend(s.device.iter().copied());
        Ok::<(), ()>(())
    })
    .unwrap();
    assert_eq!(seen, [Some(DeviceTime { device_s: 0.08, spill_s: 0.02 }), None]);
    // Without the columns, steps carry no device slice at all.
    let plain = parse("step,rank,stage,seconds\n0,0,fwd,0.1\n", None).unwrap();
    plain.for_each_step(|s| if s.device.is_empty() { Ok(()) } else { Err(()) }).unwrap();
    let e = |text: &str| parse(text, None).err().unwrap();
    let spill_over = e("step,rank,stage,seconds,device_seconds,spill_seconds\n0,0,fwd,0.1,0.01,0.02\n");
    assert_eq!(spill_over.line(), Some(2));
    assert!(spill_over.to_string().contains("spill at most the device time"), "{spill_over}");
    assert_eq!(e("step,rank,stage,seconds,device_seconds\n0,0,fwd,0.1,x\n").line(), Some(2));
}

#[test]
fn incomplete_ranks_are_missing_and_absent_stages_shorten_the_schema() {
    let text = "step,rank,stage,seconds\n0,0,a,1\n0,0,b,1\n0,1,a,1\n1,0,a,1\n1,1,a,1\n";
    let t = parse(text, None).unwrap();
    let mut seen = Vec::new();
    t.for_each_step(|s| {
        seen.push((s.schema.stages().to_vec(), s.ranks.to_vec(), s.missing.to_vec()));
        Ok::<(), ()>(())
    })
    .unwrap();
    assert_eq!(seen[0], (vec!["a".to_string(), "b".to_string()], vec![0], vec![1]));
    assert_eq!(seen[1], (vec!["a".to_string()], vec![0, 1], vec![]));
}

#[test]
fn own_time_takes_each_rows_wait_as_a_lookup_per_row_would() {
    // Rows out of order, sparse stages and steps; waits on rows, and on none.
    let text = "step,rank,stage,seconds\n3,1,b,2\n0,0,a,1\n0,2,b,1\n3,0,a,4\n7,2,a,1\n0,0,b,3\n3,1,a,0.5\n";
    let mut a = Attribution::default();
    for (key, wait) in [
        ((0, 0, 0), 0.25),
        ((0, 0, 1), 5.0),
        ((0, 1, 0), 9.0),
        ((0, 3, 0), 1.5),
        ((1, 3, 0), 0.125),
        ((1, 3, 1), 0.5),
        ((1, 4, 1), 1.0),
        ((2, 0, 1), 0.0),
        ((2, 7, 0), 0.75),
        ((2, 7, 9), 1.0),
        ((9, 3, 0), 1.0),
    ] {
        a.waits.insert(key, wait);
    }
    let mut t = parse(text, None).unwrap();
    let mut want = Vec::new();
    for row in &t.rows {
        want.push((row.seconds - a.wait(row.rank, row.step, row.stage as usize)).max(0.0));
    }
    let before: Vec<f64> = t.rows.iter().map(|r| r.seconds).collect();
    let stage_time_s = t.stage_time_s();
    t.take_out_waits(&a);
    assert_eq!(t.rows.iter().map(|r| r.seconds).collect::<Vec<_>>(), want);
    assert_ne!(want, before);
    // Stages by first appearance: b, then a.
    assert_eq!(stage_time_s, [6.0, 6.5]);
}

#[test]
fn steps_built_ahead_on_another_thread_are_the_steps_built_in_turn() {
    // Steps that change schema, ranks present and overlaps, over more steps than the
    // hand-over holds.
    let mut text = String::from("step,rank,stage,seconds,overlap_seconds\n");
    for step in 0..40u64 {
        for rank in 0..5u32 {
            for stage in ["a", "b", "c"] {
                let gone = (stage == "b" && step % 7 == 3) || (rank == 2 && stage == "c" && step % 5 == 1);
                if !gone {
                    let seconds = (step * 31 + u64::from(rank) * 7) % 13;
                    text += &format!("{step},{rank},{stage},{seconds}.5,{}\n", (step + u64::from(rank)) % 3);
                }
            }
        }
    }
    let t = parse(&text, None).unwrap();
    type Seen = (u64, Vec<String>, Vec<u32>, Vec<u32>, Vec<f64>, Vec<f64>);
    let see = |seen: &mut Vec<Seen>, s: Step| {
        let names = s.schema.stages().to_vec();
        seen.push((s.index, names, s.ranks.to_vec(), s.missing.to_vec(), s.durations.to_vec(), s.overlap_s.to_vec()));
        Ok::<(), ()>(())
    };
    let (mut in_turn, mut ahead) = (Vec::new(), Vec::new());
    t.for_each_step(|s| see(&mut in_turn, s)).unwrap();
    t.for_each_step_ahead(|s| see(&mut ahead, s)).unwrap();
    assert_eq!(in_turn.len(), 40);
    assert_eq!(ahead, in_turn);
    // The first error stops the walk, and the builder with it (the call returns).
    let mut visited = 0;
    let stopped = t.for_each_step_ahead(|s| {
        visited += 1;
        if s.index == 4 {
            Err(s.index)
        } else {
            Ok(())
        }
    });
    assert_eq!((stopped, visited), (Err(4), 5));
}
