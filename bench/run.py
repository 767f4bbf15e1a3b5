"""`make bench`: every benchmark, one after the other (loopback only, bounded in calls)."""

from bench import dialects, llm_latency, passthrough, pd_latency


def main() -> int:
    print("== KServe V2 gRPC passthrough: direct vs gateway ==", flush=True)
    passthrough.main([])
    print("\n== LLM streaming (tiny_llm): time to first token and inter-token latency ==", flush=True)
    llm_latency.main([])
    print("\n== Translated dialects: GRPS bin_data 16 MiB, TF Serving predict ==", flush=True)
    dialects.main([])
    print("\n== MindIE PD: standard instance vs coordinator + P + D (TTFT, total) ==", flush=True)
    pd_latency.main([])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
