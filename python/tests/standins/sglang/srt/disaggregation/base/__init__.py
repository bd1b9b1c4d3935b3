from sglang.srt.disaggregation.base.conn import (BaseKVBootstrapServer, BaseKVManager,
                                                  BaseKVReceiver, BaseKVSender, KVArgs,
                                                  KVPoll, StateType)
