// rmqfs oracle shim (our code): RemotingSerializable.encode(SerializerFeature...) takes these;
// JSON.toJSONString honours PrettyFormat only.
package com.alibaba.fastjson.serializer;

public enum SerializerFeature {
    QuoteFieldNames, PrettyFormat, BrowserCompatible, MapSortField, WriteMapNullValue, SortField
}
